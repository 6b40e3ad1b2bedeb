package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/sign"
)

// reportCLI runs the CLI on s, a document written to a file for put.
func reportCLI(t *testing.T, url string) func(doc string, args ...string) (int, string, string) {
	return func(doc string, args ...string) (int, string, string) {
		if doc != "" {
			f := filepath.Join(t.TempDir(), "doc.json")
			if err := os.WriteFile(f, []byte(doc), 0o600); err != nil {
				t.Fatal(err)
			}
			for i, a := range args {
				if a == "FILE" {
					args[i] = f
				}
			}
		}
		var out, errb bytes.Buffer
		code := run(append(args, "--nats", url), strings.NewReader(doc), &out, &errb)
		return code, out.String(), errb.String()
	}
}

// A schedule due now is delivered to its webhook exactly once, however
// many scheduler nodes tick at once and after a restart: the lease and
// the delivery record's compare-and-set. The POST holds the owner's JSON
// report and its Markdown, and is signed when the schedule names a key.
func TestReportScheduleWebhookOnce(t *testing.T) {
	reportBackoff = 10 * time.Millisecond
	s := natstest.RunServer(t)
	jw := reportCLI(t, s.ClientURL())
	if code, out, errs := jw(`{"name":"pay.get","pool":"pay","owner":"Team Payments","route":{"path":"/pay"},"backend":{"type":"mock"}}`, "api", "put", "FILE"); code != 0 {
		t.Fatalf("api put: %d %s %s", code, out, errs)
	}
	t.Setenv("JETWAY_REPORT_TEST_KEY", "k3y")
	var posts atomic.Int32
	var mu sync.Mutex
	var last *http.Request
	var lastBody []byte
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		last, lastBody = r, b
		mu.Unlock()
		posts.Add(1)
	}))
	defer hook.Close()
	at := time.Now().UTC().Add(-time.Minute).Format("15:04")
	sched := `{"owner":"Team Payments","every":"daily","at":"` + at + `","webhook":{"url":"` + hook.URL + `/sla","allow_private":true,"secret_env":"JETWAY_REPORT_TEST_KEY"}}`
	if code, out, errs := jw(sched, "report", "schedule", "put", "FILE"); code != 0 || !strings.Contains(out, "stored") {
		t.Fatalf("schedule put: %d %s %s", code, out, errs)
	}

	nc := natstest.Connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var senders []*reportSender
	for _, id := range []string{"node-a", "node-b"} {
		sd, err := newReportSender(ctx, nc, id, 1, log)
		if err != nil {
			t.Fatal(err)
		}
		senders = append(senders, sd)
	}
	var wg sync.WaitGroup
	for _, sd := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				if err := sd.tick(ctx); err != nil {
					t.Errorf("%s: %v", sd.id, err)
				}
			}
		}()
	}
	wg.Wait()
	// Both lose the lease (a restart of every node): a new node still
	// does not send the slot again.
	for _, sd := range senders {
		sd.store.Release(ctx, sd.id)
	}
	restarted, err := newReportSender(ctx, nc, "node-c", 1, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := restarted.tick(ctx); err != nil {
		t.Fatal(err)
	}
	if n := posts.Load(); n != 1 {
		t.Fatalf("%d posts, want 1", n)
	}
	mu.Lock()
	defer mu.Unlock()
	var got ReportHook
	if err := json.Unmarshal(lastBody, &got); err != nil {
		t.Fatal(err)
	}
	var rep slaReport
	if err := json.Unmarshal(got.Report, &rep); err != nil {
		t.Fatalf("the report: %v", err)
	}
	if got.Owner != "Team Payments" || rep.Filter != "owner Team Payments" || !strings.Contains(got.Markdown, "# SLA report") ||
		got.Until.Sub(got.From) != 24*time.Hour || got.Until.Format("15:04") != at {
		t.Errorf("the post: %+v", got)
	}
	if _, err := sign.Parse(last.Header.Get("Authorization")); err != nil || last.Header.Get(hdrReportID) == "" {
		t.Errorf("not signed: %q %v", last.Header.Get("Authorization"), err)
	}
	d, err := restarted.store.Delivery(ctx, "Team Payments")
	if err != nil || d == nil || d.State != registry.ReportSent || d.LastSent.IsZero() || d.LastError != "" || d.Tries != 1 {
		t.Errorf("the delivery record: %+v %v", d, err)
	}
	code, out, errs := jw("", "report", "schedule", "list")
	if code != 0 || !strings.Contains(out, "Team Payments") || !strings.Contains(out, "sent") {
		t.Errorf("list: %d %s %s", code, out, errs)
	}
	if code, out, errs := jw("", "report", "schedule", "delete", "Team Payments"); code != 0 {
		t.Errorf("delete: %d %s %s", code, out, errs)
	}
	if code, _, errs := jw("", "report", "schedule", "delete", "Team Payments"); code == 0 || !strings.Contains(errs, "not found") {
		t.Errorf("delete again: %d %s", code, errs)
	}
	// The put and the delete are in the audit trail, the CLI's user named.
	code, out, errs = jw("", "audit", "--kind", "report")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); code != 0 || len(lines) != 3 ||
		!strings.Contains(lines[1], "put") || !strings.Contains(lines[2], "delete") || !strings.Contains(lines[2], "Team Payments") || !strings.Contains(lines[2], "cli:") {
		t.Errorf("audit --kind report: %d %s %s", code, out, errs)
	}
}

// A receiver that fails: the delivery is retried within the attempt, then
// recorded as failed with its error, and tried again later — not at once.
func TestReportScheduleWebhookFailure(t *testing.T) {
	reportBackoff = time.Millisecond
	s := natstest.RunServer(t)
	var posts atomic.Int32
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		posts.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer hook.Close()
	nc := natstest.Connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sd, err := newReportSender(ctx, nc, "n", 1, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	sch, err := registry.ParseReportSchedule([]byte(`{"owner":"ops","every":"weekly","webhook":{"url":"` + hook.URL + `","allow_private":true,"attempts":3}}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sd.store.Put(ctx, sch); err != nil {
		t.Fatal(err)
	}
	if err := sd.tick(ctx); err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("tick: %v", err)
	}
	if err := sd.tick(ctx); err != nil {
		t.Fatalf("second tick: %v", err)
	}
	if n := posts.Load(); n != 3 {
		t.Errorf("%d posts, want 3 (one delivery of 3 attempts)", n)
	}
	d, _ := sd.store.Delivery(ctx, "ops")
	if d == nil || d.State != registry.ReportFailed || !strings.Contains(d.LastError, "503") || d.NextTry.IsZero() {
		t.Errorf("the delivery record: %+v", d)
	}
}

// Bad schedules are refused with a *registry.ValidationError naming each
// field; a webhook or mail server at a private address only with
// allow_private, the rule of async callbacks; and a name that resolves to
// one is refused when the connection is made.
func TestReportScheduleBadInput(t *testing.T) {
	for doc, want := range map[string]string{
		`{`: "report schedule",
		`{"owner":"ops","every":"hourly","webhook":{"url":"https://hooks.example.com/x"}}`:           "every",
		`{"owner":"ops","every":"daily","at":"7am","webhook":{"url":"https://hooks.example.com/x"}}`: "at",
		`{"owner":"ops","every":"daily"}`:                                                                                                                                   "webhook or smtp",
		`{"owner":"","every":"daily","webhook":{"url":"https://hooks.example.com/x"}}`:                                                                                      "owner",
		`{"owner":"ops","every":"daily","format":"pdf","webhook":{"url":"https://hooks.example.com/x"}}`:                                                                    "format",
		`{"owner":"ops","every":"daily","webhook":{"url":"ftp://hooks.example.com/x"}}`:                                                                                     "webhook.url",
		`{"owner":"ops","every":"daily","webhook":{"url":"http://127.0.0.1:8080/x"}}`:                                                                                       "not public",
		`{"owner":"ops","every":"daily","webhook":{"url":"http://10.1.2.3/x"}}`:                                                                                             "not public",
		`{"owner":"ops","every":"daily","webhook":{"url":"http://[::1]/x"}}`:                                                                                                "not public",
		`{"owner":"ops","every":"daily","webhook":{"url":"http://localhost/x"}}`:                                                                                            "localhost",
		`{"owner":"ops","every":"daily","webhook":{"url":"https://u:p@hooks.example.com/x"}}`:                                                                               "user",
		`{"owner":"ops","every":"daily","smtp":{"host":"192.168.1.1","from":"a@b.c","to":["d@e.f"]}}`:                                                                       "smtp.host",
		`{"owner":"ops","every":"daily","smtp":{"host":"mail.example.com","from":"nope","to":["d@e.f"]}}`:                                                                   "smtp.from",
		`{"owner":"ops","every":"daily","smtp":{"host":"mail.example.com","from":"a@b.c","to":[]}}`:                                                                         "smtp.to",
		`{"owner":"ops","every":"daily","smtp":{"host":"mail.example.com","from":"a@b.c","to":["d@e.f"],"password":"x"}}`:                                                   "password_env",
		`{"owner":"ops","every":"daily","smtp":{"host":"mail.example.com","from":"a@b.c","to":["d@e.f"],"username":"u"}}`:                                                   "password_env",
		`{"owner":"ops","every":"daily","weekday":"monday","webhook":{"url":"https://hooks.example.com/x"}}`:                                                                "weekday",
		`{"owner":"ops","every":"daily","webhook":{"url":"https://hooks.example.com/x","secret_env":"HOME"}}`:                                                               "JETWAY_REPORT_",
		`{"owner":"ops","every":"daily","smtp":{"host":"mail.example.com","from":"a@b.c","to":["d@e.f"],"username":"u","password_env":"NATS_PASSWORD","require_tls":true}}`: "JETWAY_REPORT_",
		`{"owner":"ops","every":"daily","smtp":{"host":"mail.example.com","from":"a@b.c","to":["d@e.f"],"username":"u","password_env":"JETWAY_REPORT_PW"}}`:                 "require_tls",
	} {
		_, err := registry.ParseReportSchedule([]byte(doc))
		var ve *registry.ValidationError
		if !errors.As(err, &ve) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: want a ValidationError with %q, got %v", doc, want, err)
		}
	}
	for _, doc := range []string{
		`{"owner":"ops","every":"daily","webhook":{"url":"http://127.0.0.1:8080/x","allow_private":true}}`,
		`{"owner":"ops","every":"weekly","weekday":"Friday","at":"23:59","format":"html","webhook":{"url":"https://hooks.example.com/x"},"smtp":{"host":"mail.example.com","from":"SLA <sla@example.com>","to":["ops@example.com"],"username":"u","password_env":"JETWAY_REPORT_SMTP_PW","require_tls":true}}`,
	} {
		if _, err := registry.ParseReportSchedule([]byte(doc)); err != nil {
			t.Errorf("%s: %v", doc, err)
		}
	}
	if err := publicOnly("tcp", "127.0.0.1:80", nil); err == nil {
		t.Error("a connection to loopback is allowed")
	}
	if err := publicOnly("tcp", "[fd00::1]:80", nil); err == nil {
		t.Error("a connection to a unique local address is allowed")
	}
	if err := publicOnly("tcp", "8.8.8.8:443", nil); err != nil {
		t.Errorf("a public address: %v", err)
	}
	// The CLI: a malformed schedule is a usage-style failure naming the field.
	s := natstest.RunServer(t)
	jw := reportCLI(t, s.ClientURL())
	if code, _, errs := jw(`{"owner":"ops","every":"hourly","webhook":{"url":"http://10.0.0.1/"}}`, "report", "schedule", "put", "FILE"); code == 0 || !strings.Contains(errs, "every") || !strings.Contains(errs, "webhook.url") {
		t.Errorf("put of a bad schedule: %d %s", code, errs)
	}
	if code, _, errs := jw("", "report", "send", "nobody"); code == 0 || !strings.Contains(errs, "not found") {
		t.Errorf("send without a schedule: %d %s", code, errs)
	}
}

// Due: the latest slot at or before now, and the period before it.
func TestReportScheduleDue(t *testing.T) {
	mk := func(doc string) *registry.ReportSchedule {
		s, err := registry.ParseReportSchedule([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	now := time.Date(2030, 6, 5, 6, 30, 0, 0, time.UTC) // a Wednesday
	due, from := mk(`{"owner":"o","every":"daily","webhook":{"url":"https://h.example.com/"}}`).Due(now)
	if !due.Equal(time.Date(2030, 6, 4, 7, 0, 0, 0, time.UTC)) || !from.Equal(due.Add(-24*time.Hour)) {
		t.Errorf("daily: %v %v", due, from)
	}
	due, from = mk(`{"owner":"o","every":"weekly","weekday":"wednesday","at":"06:30","webhook":{"url":"https://h.example.com/"}}`).Due(now)
	if !due.Equal(now) || !from.Equal(now.AddDate(0, 0, -7)) {
		t.Errorf("weekly: %v %v", due, from)
	}
	due, _ = mk(`{"owner":"o","every":"weekly","webhook":{"url":"https://h.example.com/"}}`).Due(now)
	if !due.Equal(time.Date(2030, 6, 3, 7, 0, 0, 0, time.UTC)) {
		t.Errorf("weekly on monday: %v", due)
	}
}

// smtpMsg is what the test SMTP server received.
type smtpMsg struct {
	auth, from string
	to         []string
	data       string
}

// smtpServer is a tiny SMTP server: EHLO (AUTH PLAIN, no STARTTLS),
// AUTH, MAIL, RCPT, DATA, QUIT; each message goes to the channel.
func smtpServer(t *testing.T) (string, <-chan smtpMsg) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	got := make(chan smtpMsg, 4)
	// STARTTLS with httptest's certificate (for 127.0.0.1), trusted by
	// the sender for the test.
	ts := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(ts.Close)
	cert := ts.TLS.Certificates[0]
	old := reportRootCAs
	reportRootCAs = ts.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	t.Cleanup(func() { reportRootCAs = old })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				tp := textproto.NewConn(c)
				tlsOn := false
				var m smtpMsg
				_ = tp.PrintfLine("220 test ESMTP")
				for {
					line, err := tp.ReadLine()
					if err != nil {
						return
					}
					verb, arg, _ := strings.Cut(line, " ")
					switch strings.ToUpper(verb) {
					case "EHLO", "HELO":
						_ = tp.PrintfLine("250-test")
						if !tlsOn {
							_ = tp.PrintfLine("250-STARTTLS")
						}
						_ = tp.PrintfLine("250-AUTH PLAIN")
						_ = tp.PrintfLine("250 8BITMIME")
					case "STARTTLS":
						_ = tp.PrintfLine("220 go ahead")
						tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{cert}})
						if tc.Handshake() != nil {
							return
						}
						tp, tlsOn = textproto.NewConn(tc), true
					case "AUTH":
						if !tlsOn {
							_ = tp.PrintfLine("538 encryption required")
							continue
						}
						_, b64, _ := strings.Cut(arg, " ")
						b, _ := base64.StdEncoding.DecodeString(b64)
						m.auth = string(b)
						_ = tp.PrintfLine("235 ok")
					case "MAIL":
						m.from = arg
						_ = tp.PrintfLine("250 ok")
					case "RCPT":
						m.to = append(m.to, arg)
						_ = tp.PrintfLine("250 ok")
					case "DATA":
						_ = tp.PrintfLine("354 go on")
						b, err := tp.ReadDotBytes()
						if err != nil {
							return
						}
						m.data = string(b)
						_ = tp.PrintfLine("250 queued")
						got <- m
					case "QUIT":
						_ = tp.PrintfLine("221 bye")
						return
					default:
						_ = tp.PrintfLine("502 not here")
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), got
}

// jetway report send mails the owner's report now: one message, logged
// in with the password from the environment, holding the Markdown report.
func TestReportSendSMTP(t *testing.T) {
	reportBackoff = 10 * time.Millisecond
	addr, got := smtpServer(t)
	host, port, _ := net.SplitHostPort(addr)
	s := natstest.RunServer(t)
	jw := reportCLI(t, s.ClientURL())
	t.Setenv("JETWAY_REPORT_TEST_SMTP_PW", "s3cret")
	sched := `{"owner":"payments","every":"daily","smtp":{"host":"` + host + `","port":` + port + `,"allow_private":true,
		"from":"SLA <sla@example.com>","to":["ops@example.com","Lead <lead@example.com>"],"username":"sla","password_env":"JETWAY_REPORT_TEST_SMTP_PW","require_tls":true}}`
	if code, out, errs := jw(sched, "report", "schedule", "put", "FILE"); code != 0 {
		t.Fatalf("schedule put: %d %s %s", code, out, errs)
	}
	if code, out, errs := jw("", "report", "send", "payments", "--since", "7d"); code != 0 || !strings.Contains(out, "sent the SLA report of payments") {
		t.Fatalf("send: %d %s %s", code, out, errs)
	}
	select {
	case m := <-got:
		if m.auth != "\x00sla\x00s3cret" || !strings.Contains(m.from, "<sla@example.com>") || len(m.to) != 2 || !strings.Contains(m.to[1], "<lead@example.com>") {
			t.Errorf("envelope: %+v", m)
		}
		if !strings.Contains(m.data, "Subject: ") || !strings.Contains(m.data, "SLA report") || !strings.Contains(m.data, "# SLA report") ||
			!strings.Contains(m.data, "(owner payments)") || !strings.Contains(m.data, "Content-Type: text/plain") {
			t.Errorf("message:\n%s", m.data)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no message")
	}
	select {
	case m := <-got:
		t.Fatalf("a second message: %+v", m)
	case <-time.After(200 * time.Millisecond):
	}
	// Without the password on this node: refused at once, not retried.
	t.Setenv("JETWAY_REPORT_TEST_SMTP_PW", "")
	if code, _, errs := jw("", "report", "send", "payments"); code == 0 || !strings.Contains(errs, "JETWAY_REPORT_TEST_SMTP_PW is not set") {
		t.Errorf("send without the password: %d %s", code, errs)
	}
}

// The lease is renewed between owners: a node that lost it during a long
// send sends no further owner in that tick (another node now does).
func TestReportScheduleLeaseLostBetweenOwners(t *testing.T) {
	reportBackoff = time.Millisecond
	oldTTL := reportLeaseTTL
	reportLeaseTTL = 100 * time.Millisecond
	t.Cleanup(func() { reportLeaseTTL = oldTTL })
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	a, err := newReportSender(ctx, nc, "node-a", 1, log)
	if err != nil {
		t.Fatal(err)
	}
	b, err := newReportSender(ctx, nc, "node-b", 1, log)
	if err != nil {
		t.Fatal(err)
	}
	var posts atomic.Int32
	hook := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		posts.Add(1)
		// The send outlives the lease, and node-b takes it meanwhile.
		time.Sleep(300 * time.Millisecond)
		if held, err := b.store.Lease(ctx, "node-b", time.Now().UTC(), time.Minute); !held || err != nil {
			t.Errorf("node-b did not take the expired lease: %v %v", held, err)
		}
	}))
	defer hook.Close()
	for _, owner := range []string{"a-team", "b-team"} {
		sch, err := registry.ParseReportSchedule([]byte(`{"owner":"` + owner + `","every":"daily","webhook":{"url":"` + hook.URL + `","allow_private":true}}`))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.store.Put(ctx, sch); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.tick(ctx); err != nil {
		t.Fatal(err)
	}
	if n := posts.Load(); n != 1 {
		t.Fatalf("%d posts, want 1: the second owner is sent after the lease was lost", n)
	}
	if d, _ := a.store.Delivery(ctx, "b-team"); d != nil {
		t.Errorf("b-team claimed by the node without the lease: %+v", d)
	}
}

// An owner's whole send is bounded by reportSendTimeout (well under
// reportStaleClaim), retries included, and recorded as failed; a webhook
// URL's path and query (a secret) are not in the error stored or logged.
func TestReportScheduleSendBoundedAndRedacted(t *testing.T) {
	reportBackoff = time.Millisecond
	old := reportSendTimeout
	reportSendTimeout = 300 * time.Millisecond
	t.Cleanup(func() { reportSendTimeout = old })
	if reportSendTimeout >= reportStaleClaim || old >= reportStaleClaim/2 {
		t.Fatal("the send bound must be well under the stale claim")
	}
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sd, err := newReportSender(ctx, nc, "n", 1, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	hook := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		select {
		case <-release:
		case <-time.After(10 * time.Second):
		}
	}))
	defer hook.Close()
	defer close(release)
	sch, err := registry.ParseReportSchedule([]byte(`{"owner":"slow","every":"daily","webhook":{"url":"` + hook.URL + `/t0ken-s3cret?key=k3y","allow_private":true,"timeout":"1m","attempts":10}}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sd.store.Put(ctx, sch); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = sd.tick(ctx)
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the send took %v, not bounded", took)
	}
	if err == nil || strings.Contains(err.Error(), "t0ken") || strings.Contains(err.Error(), "k3y") {
		t.Errorf("tick: %v", err)
	}
	d, _ := sd.store.Delivery(ctx, "slow")
	if d == nil || d.State != registry.ReportFailed || d.LastError == "" || strings.Contains(d.LastError, "t0ken") || strings.Contains(d.LastError, "k3y") {
		t.Errorf("the delivery record: %+v", d)
	}
	// A receiver that refuses the connection: the error names the URL
	// (net/http's), redacted.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	sch2, err := registry.ParseReportSchedule([]byte(`{"owner":"gone","every":"daily","webhook":{"url":"http://` + addr + `/hooks/t0ken-s3cret?key=k3y","allow_private":true,"attempts":1}}`))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	err = sd.send(ctx, sch2, now.Add(-time.Hour), now)
	if err == nil || strings.Contains(err.Error(), "t0ken") || strings.Contains(err.Error(), "k3y") || !strings.Contains(err.Error(), addr) {
		t.Errorf("send: %v", err)
	}
}
