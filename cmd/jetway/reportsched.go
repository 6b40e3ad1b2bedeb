package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/mail"
	"net/smtp"
	neturl "net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/report"
	"github.com/jetway-gw/jetway/sign"
)

// Scheduled SLA reports (docs/reports.md): the serve or admin node that
// holds the lease in jetway_reports sends each owner's report when it is
// due, claiming the slot in the owner's delivery record first by
// compare-and-set, so that two nodes never both send it and a restart
// neither sends it again nor skips it.

// Scheduler timing; tests shorten them.
var (
	reportTick       = 30 * time.Second
	reportLeaseTTL   = 90 * time.Second
	reportRetryAfter = 15 * time.Minute // a failed slot is tried again
	reportStaleClaim = 10 * time.Minute // a claim whose node died mid-send
	reportBackoff    = time.Second      // between attempts, doubling to 30s
	// reportSendTimeout bounds an owner's whole send, every retry of
	// every means included, well under reportStaleClaim: nothing renews a
	// claim while it is sent, so a send that outlived reportStaleClaim
	// would be sent again by another node.
	reportSendTimeout = 4 * time.Minute
	// reportRootCAs are the roots SMTP's STARTTLS trusts (nil: the
	// system's); tests set them.
	reportRootCAs *x509.CertPool
)

// reportSender builds and delivers reports.
type reportSender struct {
	js    jetstream.JetStream
	c     *registry.Client
	store *registry.Reports
	id    string
	log   *slog.Logger
	now   func() time.Time
}

// runReportScheduler sends the scheduled SLA reports until ctx ends: the
// hook of serve and admin nodes (node.go, createBuckets).
func runReportScheduler(ctx context.Context, nc *nats.Conn, id string, replicas int, log *slog.Logger) {
	// The bucket and the registry are opened on the first tick that can
	// (JetStream may not be ready when the node starts), not once only.
	var s *reportSender
	defer func() {
		if s == nil {
			return
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		s.store.Release(rctx, id)
		cancel()
	}()
	t := time.NewTicker(reportTick)
	defer t.Stop()
	for {
		if s == nil {
			sd, err := newReportSender(ctx, nc, id, replicas, log)
			if err != nil && ctx.Err() == nil {
				log.Warn("sla report schedules: not ready, trying again", "err", err, "in", reportTick)
			} else if err == nil {
				s = sd
			}
		}
		if s != nil {
			if err := s.tick(ctx); err != nil && ctx.Err() == nil {
				log.Warn("sla report schedules", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func newReportSender(ctx context.Context, nc *nats.Conn, id string, replicas int, log *slog.Logger) (*reportSender, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	store, err := registry.OpenReports(octx, js, registry.BucketOptions{Replicas: replicas})
	if err != nil {
		return nil, err
	}
	c, err := registry.NewClient(octx, nc, registry.BucketOptions{Replicas: replicas})
	if err != nil {
		return nil, err
	}
	return &reportSender{js: js, c: c, store: store, id: id, log: log, now: time.Now}, nil
}

// tick takes or renews the lease and, holding it, sends what is due.
func (s *reportSender) tick(ctx context.Context) error {
	now := s.now().UTC()
	held, err := s.store.Lease(ctx, s.id, now, reportLeaseTTL)
	if err != nil || !held {
		return err
	}
	scheds, bad, err := s.store.List(ctx)
	if err != nil {
		return err
	}
	for _, e := range bad {
		s.log.Warn("sla report schedule not valid; not sent", "err", e)
	}
	var errs []error
	for i, sch := range scheds {
		if i > 0 {
			// A send may have been long: renew the lease, and stop when
			// another node holds it now.
			held, err := s.store.Lease(ctx, s.id, s.now().UTC(), reportLeaseTTL)
			if err != nil || !held {
				if err != nil {
					errs = append(errs, fmt.Errorf("renewing the lease: %w", err))
				}
				break
			}
		}
		if err := s.runOne(ctx, sch, now); err != nil {
			errs = append(errs, fmt.Errorf("report of %q: %w", sch.Owner, err))
		}
	}
	return errors.Join(errs...)
}

// runOne sends an owner's report if its latest slot has not been sent.
func (s *reportSender) runOne(ctx context.Context, sch *registry.ReportSchedule, now time.Time) error {
	due, from := sch.Due(now)
	d, err := s.store.Delivery(ctx, sch.Owner)
	if err != nil {
		return err
	}
	next := &registry.ReportDelivery{Owner: sch.Owner, Due: due, State: registry.ReportSending, By: s.id, Claimed: now, Tries: 1}
	if d != nil {
		next.Revision, next.LastSent, next.LastError = d.Revision, d.LastSent, d.LastError
		if !d.Due.Before(due) { // this slot is known
			switch {
			case d.State == registry.ReportSent:
				return nil
			case d.State == registry.ReportSending && now.Sub(d.Claimed) < reportStaleClaim:
				return nil
			case d.State == registry.ReportFailed && now.Before(d.NextTry):
				return nil
			}
			next.Tries = d.Tries + 1
		}
	}
	rev, err := s.store.SetDelivery(ctx, next)
	if errors.Is(err, registry.ErrReportConflict) {
		return nil // another node claimed it
	} else if err != nil {
		return err
	}
	s.log.Info("sending sla report", "owner", sch.Owner, "from", from, "until", due)
	sctx, cancel := context.WithTimeout(ctx, reportSendTimeout)
	sendErr := s.send(sctx, sch, from, due)
	cancel()
	next.Revision = rev
	if sendErr == nil {
		next.State, next.LastSent, next.LastError, next.NextTry = registry.ReportSent, s.now().UTC(), "", time.Time{}
	} else {
		next.State, next.LastError, next.NextTry = registry.ReportFailed, sendErr.Error(), s.now().UTC().Add(reportRetryAfter)
		s.log.Warn("sla report not delivered", "owner", sch.Owner, "err", sendErr, "retry_at", next.NextTry)
	}
	if _, err := s.store.SetDelivery(context.WithoutCancel(ctx), next); err != nil {
		return errors.Join(sendErr, fmt.Errorf("recording the delivery: %w", err))
	}
	return sendErr
}

// reportBodies are a report in each form a delivery uses.
type reportBodies struct {
	JSON json.RawMessage
	MD   string
	HTML string // only when the schedule's format is html
}

// send builds the owner's report of [from, until) and delivers it by
// every means the schedule names.
func (s *reportSender) send(ctx context.Context, sch *registry.ReportSchedule, from, until time.Time) error {
	o := report.Options{From: from, Until: until, Format: sch.Format, Owner: sch.Owner, Target: 99.99, Top: 10}
	in, err := report.Read(ctx, s.js, s.c, o)
	if err != nil {
		return fmt.Errorf("reading the report's records: %w", err)
	}
	r := report.Build(in, o)
	var b reportBodies
	var buf bytes.Buffer
	if err := report.Write(&buf, r, "json"); err != nil {
		return err
	}
	b.JSON = bytes.Clone(bytes.TrimSpace(buf.Bytes()))
	buf.Reset()
	if err := report.Write(&buf, r, "md"); err != nil {
		return err
	}
	b.MD = buf.String()
	if sch.Format == "html" {
		buf.Reset()
		if err := report.Write(&buf, r, "html"); err != nil {
			return err
		}
		b.HTML = buf.String()
	}
	var errs []error
	if w := sch.Webhook; w != nil {
		if err := retry(ctx, w.Attempts, func() error { return postReport(ctx, sch, from, until, b) }); err != nil {
			// The URL's path and query may hold a secret: the error is
			// stored (LastError) and logged without them.
			errs = append(errs, fmt.Errorf("webhook: %s", redactWebhookURL(err.Error(), w.URL)))
		}
	}
	if m := sch.SMTP; m != nil {
		if err := retry(ctx, m.Attempts, func() error { return mailReport(ctx, sch, from, until, b) }); err != nil {
			errs = append(errs, fmt.Errorf("smtp: %w", err))
		}
	}
	return errors.Join(errs...)
}

// retry runs f up to attempts times, with a backoff doubling from
// reportBackoff to 30s; a permanent error is not tried again.
func retry(ctx context.Context, attempts int, f func() error) error {
	wait := reportBackoff
	var err error
	for i := range max(attempts, 1) {
		if i > 0 {
			select {
			case <-ctx.Done():
				return errors.Join(err, ctx.Err())
			case <-time.After(wait):
			}
			wait = min(2*wait, 30*time.Second)
		}
		if err = f(); err == nil {
			return nil
		}
		var p permanent
		if errors.As(err, &p) {
			return err
		}
	}
	return err
}

// permanent is an error no retry mends (a refused address, a missing
// setting).
type permanent struct{ error }

func (p permanent) Unwrap() error { return p.error }

// ReportHook is the JSON a report webhook receives.
type ReportHook struct {
	Owner    string          `json:"owner"`
	From     time.Time       `json:"from"`
	Until    time.Time       `json:"until"`
	Report   json.RawMessage `json:"report"`
	Markdown string          `json:"markdown"`
	HTML     string          `json:"html,omitempty"`
}

// Webhook headers: the owner and an id the receiver may use to drop a
// report it already has (owner and period).
const (
	hdrReportOwner = "Jetway-Report-Owner"
	hdrReportID    = "Idempotency-Key"
	reportSignApp  = "jetway-report"
)

func postReport(ctx context.Context, sch *registry.ReportSchedule, from, until time.Time, b reportBodies) error {
	w := sch.Webhook
	u, err := registry.ReportWebhookURL(w.URL, w.AllowPrivate)
	if err != nil {
		return permanent{fmt.Errorf("the url %v", err)}
	}
	body, err := json.Marshal(ReportHook{Owner: sch.Owner, From: from, Until: until, Report: b.JSON, Markdown: b.MD, HTML: b.HTML})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(w.Timeout))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return permanent{err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "jetway-report")
	req.Header.Set(hdrReportOwner, mime.QEncoding.Encode("utf-8", sch.Owner))
	req.Header.Set(hdrReportID, "sla-"+strconv.FormatInt(from.Unix(), 10)+"-"+strconv.FormatInt(until.Unix(), 10)+"-"+reportOwnerToken(sch.Owner))
	if w.SecretEnv != "" {
		key := os.Getenv(w.SecretEnv)
		if key == "" {
			return permanent{fmt.Errorf("the signing key's environment variable %s is not set on this node", w.SecretEnv)}
		}
		if err := sign.Sign(req, body, reportSignApp, []byte(key), hdrReportOwner, hdrReportID); err != nil {
			return err
		}
	}
	resp, err := reportClient(w.AllowPrivate).Do(req)
	if err != nil {
		var ue *neturl.Error
		if errors.As(err, &ue) {
			ue.URL = redactedURL(ue.URL)
		}
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("the receiver answered %d", resp.StatusCode)
	}
	return nil
}

// redactedURL is a webhook URL without its path and query
// (report.RedactedURL).
func redactedURL(raw string) string { return report.RedactedURL(raw) }

// redactWebhookURL replaces the webhook URL, as given and as normalized,
// in msg by redactedURL.
func redactWebhookURL(msg, raw string) string {
	r := redactedURL(raw)
	if u, err := registry.ReportWebhookURL(raw, true); err == nil && u != "" {
		msg = strings.ReplaceAll(msg, u, r)
	}
	if raw != "" {
		msg = strings.ReplaceAll(msg, raw, r)
	}
	return msg
}

// reportOwnerToken is an owner as a header-safe token.
func reportOwnerToken(owner string) string {
	var b strings.Builder
	for _, r := range owner {
		if r < 0x80 && (r == '-' || r == '_' || r == '.' || (r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z')) {
			b.WriteRune(r)
		} else {
			fmt.Fprintf(&b, "%%%X", string(r))
		}
	}
	return b.String()
}

// publicOnly refuses a connection to an address that is not public,
// after the name is resolved — the rule of async callbacks
// (workers/callbacks.go), so that no name can point a report inside the
// network.
func publicOnly(_, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); ip == nil || !registry.PublicIP(ip) {
		return fmt.Errorf("refused: %s is not a public address (the schedule may allow_private)", host)
	}
	return nil
}

func reportDialer(allowPrivate bool) *net.Dialer {
	d := &net.Dialer{Timeout: 10 * time.Second}
	if !allowPrivate {
		d.Control = publicOnly
	}
	return d
}

// reportClient is the webhooks' HTTP client: no redirects, no proxy from
// the environment, public addresses only unless allowed.
func reportClient(allowPrivate bool) *http.Client {
	tr := &http.Transport{DialContext: reportDialer(allowPrivate).DialContext, TLSHandshakeTimeout: 10 * time.Second,
		ResponseHeaderTimeout: registry.MaxCallbackTimeout, ForceAttemptHTTP2: true, DisableKeepAlives: true}
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// mailReport sends the report by SMTP, with STARTTLS when the server
// offers it (required with require_tls), logging in with AUTH PLAIN when
// the schedule names a user (net/smtp refuses to over plain text but to
// localhost).
func mailReport(ctx context.Context, sch *registry.ReportSchedule, from, until time.Time, b reportBodies) error {
	m := sch.SMTP
	ctx, cancel := context.WithTimeout(ctx, time.Duration(m.Timeout))
	defer cancel()
	var password string
	if m.Username != "" {
		if password = os.Getenv(m.PasswordEnv); password == "" {
			return permanent{fmt.Errorf("the password's environment variable %s is not set on this node", m.PasswordEnv)}
		}
	}
	addr := net.JoinHostPort(m.Host, strconv.Itoa(m.Port))
	conn, err := reportDialer(m.AllowPrivate).DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	c, err := smtp.NewClient(conn, m.Host)
	if err != nil {
		_ = conn.Close()
		return err
	}
	defer func() { _ = c.Close() }()
	if err := c.Hello("jetway"); err != nil {
		return err
	}
	if ok, _ := c.Extension("STARTTLS"); ok {
		if err := c.StartTLS(&tls.Config{ServerName: m.Host, MinVersion: tls.VersionTLS12, RootCAs: reportRootCAs}); err != nil {
			return err
		}
	} else if m.RequireTLS {
		return permanent{fmt.Errorf("%s does not offer STARTTLS and the schedule requires TLS", addr)}
	}
	if m.Username != "" {
		if err := c.Auth(smtp.PlainAuth("", m.Username, password, m.Host)); err != nil {
			return err
		}
	}
	fromAddr, _ := parseAddr(m.From)
	if err := c.Mail(fromAddr); err != nil {
		return err
	}
	for _, to := range m.To {
		a, _ := parseAddr(to)
		if err := c.Rcpt(a); err != nil {
			return err
		}
	}
	wc, err := c.Data()
	if err != nil {
		return err
	}
	if _, err := wc.Write(reportMail(sch, from, until, b)); err != nil {
		return err
	}
	if err := wc.Close(); err != nil {
		return err
	}
	return c.Quit()
}

// parseAddr is the address of a mail address ("Ops <ops@x>": ops@x).
func parseAddr(s string) (string, error) {
	a, err := mail.ParseAddress(s)
	if err != nil {
		return "", err
	}
	return a.Address, nil
}

// reportMail is the message: the report in the schedule's format.
func reportMail(sch *registry.ReportSchedule, from, until time.Time, b reportBodies) []byte {
	m := sch.SMTP
	ctype, body := "text/plain; charset=utf-8", b.MD
	switch sch.Format {
	case "html":
		ctype, body = "text/html; charset=utf-8", b.HTML
	case "json":
		ctype, body = "application/json", string(b.JSON)+"\n"
	}
	subject := fmt.Sprintf("SLA report %s: %s — %s", sch.Owner, from.UTC().Format("2006-01-02 15:04"), until.UTC().Format("2006-01-02 15:04 UTC"))
	var w bytes.Buffer
	fmt.Fprintf(&w, "From: %s\r\n", m.From)
	fmt.Fprintf(&w, "To: %s\r\n", strings.Join(m.To, ", "))
	fmt.Fprintf(&w, "Subject: %s\r\n", mime.QEncoding.Encode("utf-8", subject))
	fmt.Fprintf(&w, "Date: %s\r\n", time.Now().UTC().Format(time.RFC1123Z))
	fmt.Fprintf(&w, "Message-ID: <sla-%d-%d-%s@jetway>\r\n", from.Unix(), until.Unix(), reportOwnerToken(sch.Owner))
	w.WriteString("MIME-Version: 1.0\r\n")
	fmt.Fprintf(&w, "Content-Type: %s\r\n", ctype)
	w.WriteString("Content-Transfer-Encoding: 8bit\r\n\r\n")
	// Lines end in CRLF; net/smtp's writer dot-stuffs.
	w.WriteString(strings.ReplaceAll(strings.ReplaceAll(body, "\r\n", "\n"), "\n", "\r\n"))
	return w.Bytes()
}

// ---- CLI: jetway report schedule put|list|delete, jetway report send ----

const reportScheduleUsage = `Usage:
  jetway report schedule put FILE|-    store an owner's schedule (JSON or YAML)
  jetway report schedule list          every schedule and its last delivery
  jetway report schedule delete OWNER  remove an owner's schedule
  jetway report send OWNER [--since 24h] [--until T]
                                       send the owner's report now, as its schedule says

A schedule: {"owner": "payments", "every": "daily"|"weekly", "at": "07:00"
(UTC), "weekday": "monday" (weekly), "format": "md"|"html"|"json",
"webhook": {"url", "allow_private", "secret_env", "timeout", "attempts"},
"smtp": {"host", "port", "from", "to": [...], "username", "password_env",
"require_tls", "allow_private", "timeout", "attempts"}} (docs/reports.md).

Flags:
`

func cmdReportSchedule(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newReportSubFlags("jetway report schedule", stderr)
	rf := addRegistryFlags(fs)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	want := map[string]int{"put": 1, "list": 0, "delete": 1}
	if len(pos) == 0 {
		return fmt.Errorf("%w: jetway report schedule put FILE|-, list or delete OWNER", errUsage)
	}
	n, ok := want[pos[0]]
	if !ok || len(pos)-1 != n {
		return fmt.Errorf("%w: jetway report schedule put FILE|-, list or delete OWNER (got %q)", errUsage, pos)
	}
	var doc []byte
	if pos[0] == "put" {
		if doc, err = readDoc(pos[1], stdin); err != nil {
			return err
		}
		if _, err := registry.ParseReportSchedule(doc); err != nil {
			return describeInvalid(err, stderr, "report schedule")
		}
	}
	ctx, c, _, store, done, err := openReportStore(rf)
	if err != nil {
		return err
	}
	defer done()
	switch pos[0] {
	case "put":
		s, _ := registry.ParseReportSchedule(doc)
		rev, err := c.PutReportSchedule(ctx, store, s)
		if err != nil {
			return describeInvalid(err, stderr, "report schedule")
		}
		due, _ := s.Due(time.Now())
		fmt.Fprintf(stdout, "report schedule of %s stored at revision %d (%s at %s UTC; last due %s)\n", s.Owner, rev, s.Every, s.At, due.Format(time.RFC3339))
	case "delete":
		if err := c.DeleteReportSchedule(ctx, store, pos[1]); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "deleted the report schedule of %s\n", pos[1])
	case "list":
		scheds, bad, err := store.List(ctx)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "OWNER\tEVERY\tAT (UTC)\tFORMAT\tTO\tLAST DUE\tSTATE\tLAST SENT\tLAST ERROR")
		for _, s := range scheds {
			var to []string
			if s.Webhook != nil {
				to = append(to, s.Webhook.URL)
			}
			if s.SMTP != nil {
				to = append(to, strings.Join(s.SMTP.To, ","))
			}
			every := s.Every
			if s.Weekday != "" {
				every += " (" + s.Weekday + ")"
			}
			last, state, sent, lerr := "-", "-", "-", ""
			if d, err := store.Delivery(ctx, s.Owner); err == nil && d != nil {
				last, state, lerr = d.Due.Format(time.RFC3339), d.State, d.LastError
				if !d.LastSent.IsZero() {
					sent = d.LastSent.Format(time.RFC3339)
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Owner, every, s.At, s.Format, strings.Join(to, " "), last, state, sent, lerr)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, e := range bad {
			fmt.Fprintf(stderr, "jetway: warning: %v\n", e)
		}
	}
	return nil
}

func newReportSubFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, reportScheduleUsage)
		fs.PrintDefaults()
	}
	return fs
}

// cmdReportSend sends an owner's report now, as its schedule says, for
// the period given; the schedule's delivery record is left alone.
func cmdReportSend(args []string, stdout, stderr io.Writer) error {
	fs := newReportSubFlags("jetway report send", stderr)
	rf := addRegistryFlags(fs)
	if t := fs.Lookup("timeout"); t != nil {
		_ = t.Value.Set("2m")
		t.DefValue = "2m"
	}
	since := fs.String("since", "24h", "start of the period: a duration back from now (24h, 7d), a date or an RFC 3339 time")
	until := fs.String("until", "", "end of the period (same forms); default now")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: jetway report send OWNER [--since 24h]", errUsage)
	}
	now := time.Now().UTC()
	from, err := parseWhen(*since, now)
	if err != nil {
		return fmt.Errorf("%w: --since: %v", errUsage, err)
	}
	to := now
	if *until != "" {
		if to, err = parseWhen(*until, now); err != nil {
			return fmt.Errorf("%w: --until: %v", errUsage, err)
		}
	}
	if !from.Before(to) {
		return fmt.Errorf("%w: the period is empty", errUsage)
	}
	ctx, c, js, store, done, err := openReportStore(rf)
	if err != nil {
		return err
	}
	defer done()
	sch, err := store.Get(ctx, pos[0])
	if err != nil {
		return err
	}
	s := &reportSender{js: js, c: c, store: store, id: "cli", log: slog.New(slog.NewTextHandler(stderr, nil)), now: time.Now}
	if err := s.send(ctx, sch, from, to); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "sent the SLA report of %s (%s — %s)\n", sch.Owner, from.Format(time.RFC3339), to.Format(time.RFC3339))
	return nil
}

// openReportStore dials NATS and opens the report schedules' store.
func openReportStore(rf registryFlags) (context.Context, *registry.Client, jetstream.JetStream, *registry.Reports, func(), error) {
	ctx, c, js, done, err := rf.dialJS(1)
	if err != nil {
		return nil, nil, nil, nil, nil, err
	}
	store, err := registry.OpenReports(ctx, js, registry.BucketOptions{})
	if err != nil {
		done()
		return nil, nil, nil, nil, nil, err
	}
	return ctx, c, js, store, done, nil
}
