package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/internal/jetwaytest"
	"github.com/jetway-gw/jetway/registry"
)

// Every write through the CLI lands in the audit trail with who made it
// and the revision it made; audit lists them oldest first, by kind too.
func TestAuditCommand(t *testing.T) {
	url := natstest.RunServer(t).ClientURL()
	jw := func(stdin string, args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := run(append(args, "--nats", url), strings.NewReader(stdin), &out, &errb)
		return code, out.String() + errb.String()
	}
	if code, out := jw("", "audit"); code != 0 || strings.Count(out, "\n") != 1 {
		t.Fatalf("an empty trail: %d %s", code, out)
	}
	steps := [][]string{
		{`{"name":"aud","pool":"p","route":{"path":"/aud"},"backend":{"type":"mock"}}`, "api", "put", "-"},
		{"", "degrade", "on", "aud"},
		{"", "degrade", "off", "aud"},
		{"", "api", "delete", "aud"},
	}
	for _, s := range steps {
		if code, out := jw(s[0], s[1:]...); code != 0 {
			t.Fatalf("%v: %d %s", s[1:], code, out)
		}
	}
	code, out := jw("", "audit", "--json")
	if code != 0 {
		t.Fatalf("%d %s", code, out)
	}
	var got []registry.Change
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var ch registry.Change
		if err := json.Unmarshal([]byte(line), &ch); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		got = append(got, ch)
	}
	want := []string{"put api aud", "put degrade aud", "delete degrade aud", "delete api aud"}
	if len(got) != len(want) {
		t.Fatalf("%d changes: %s", len(got), out)
	}
	for i, ch := range got {
		if ch.Action+" "+ch.Kind+" "+ch.Key != want[i] || !strings.HasPrefix(ch.Actor, "cli:") || ch.At.IsZero() {
			t.Errorf("change %d: %+v, want %s by cli:…", i, ch, want[i])
		}
	}
	if got[0].Revision == 0 || got[3].Revision != 0 {
		t.Errorf("revisions: %+v", got)
	}
	if code, out := jw("", "audit", "--kind", "api"); code != 0 || strings.Count(out, "\n") != 3 || strings.Contains(out, "degrade") {
		t.Errorf("--kind api: %d %s", code, out)
	}
	if code, out := jw("", "audit", "--limit", "1", "--json"); code != 0 || !strings.Contains(out, `"action":"delete","kind":"api"`) || strings.Count(out, "\n") != 1 {
		t.Errorf("--limit 1: %d %s", code, out)
	}
}

// api diff shows field by field what changed between two revisions: the
// last two, one and the newest, or two given; a deletion or a revision not
// kept is refused with why.
func TestAPIDiff(t *testing.T) {
	url := natstest.RunServer(t).ClientURL()
	jw := func(stdin string, args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := run(append(args, "--nats", url), strings.NewReader(stdin), &out, &errb)
		return code, out.String() + errb.String()
	}
	for _, doc := range []string{
		`{"name":"d","pool":"p","route":{"path":"/d"},"backend":{"type":"mock","body":"one"},"timeout":"1s"}`,
		`{"name":"d","pool":"p","route":{"path":"/d"},"backend":{"type":"mock","body":"two"},"description":"x"}`,
	} {
		if code, out := jw(doc, "api", "put", "-"); code != 0 {
			t.Fatalf("put: %d %s", code, out)
		}
	}
	code, out := jw("", "api", "diff", "d")
	if code != 0 || !strings.Contains(out, `~ /backend/body: "one" -> "two"`) || !strings.Contains(out, `+ /description: "x"`) ||
		!strings.Contains(out, `- /timeout: "1s"`) || strings.Contains(out, "/pool") || strings.Contains(out, "created_revision") {
		t.Errorf("diff: %d\n%s", code, out)
	}
	if code, out := jw("", "api", "diff", "d", "1", "1"); code != 0 || !strings.Contains(out, "(the same value)") {
		t.Errorf("a revision with itself: %d %s", code, out)
	}
	if code, out := jw("", "api", "diff", "d", "99"); code != 1 || !strings.Contains(out, "not kept") {
		t.Errorf("a revision not kept: %d %s", code, out)
	}
	if code, out := jw("", "api", "diff", "d", "x"); code != 2 {
		t.Errorf("a bad revision: %d %s", code, out)
	}
}

// --change-webhook: every change is posted in order, at least once; one
// the hook refuses is posted again after a pause, not lost.
func TestChangeWebhook(t *testing.T) {
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := registry.NewClient(ctx, nc, registry.BucketOptions{})
	if err != nil {
		t.Fatal(err)
	}
	saved := changeWebhookBackoff
	changeWebhookBackoff = []time.Duration{50 * time.Millisecond, 50 * time.Millisecond}
	defer func() { changeWebhookBackoff = saved }()
	var mu sync.Mutex
	var got []registry.Change
	refused := 0
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if refused == 0 {
			refused++
			w.WriteHeader(503)
			return
		}
		var ch registry.Change
		if err := json.NewDecoder(r.Body).Decode(&ch); err != nil || r.Header.Get("Jetway-Change-Seq") == "" {
			t.Errorf("%v %v", err, r.Header)
		}
		got = append(got, ch)
	}))
	defer hook.Close()
	js, _ := jetstream.New(nc)
	go func() { _ = deliverChanges(ctx, js, hook.URL, slog.New(slog.DiscardHandler)) }()
	time.Sleep(200 * time.Millisecond) // the consumer delivers what comes after it was made
	if _, err := c.Put(ctx, []byte(`{"name":"w1","pool":"p","route":{"path":"/w1"},"backend":{"type":"mock"}}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetDegrade(ctx, "w1", &registry.Degrade{On: true}); err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(got) != 2 || got[0].Kind != "api" || got[1].Kind != "degrade" {
			return fmt.Errorf("delivered %+v (refused %d)", got, refused)
		}
		return nil
	})
}

// api test sends an API's saved cases through a real edge and reports
// each: status, headers and body fields by pointer; a sandbox app's key
// tests the sandbox tier; a failing case fails the command.
func TestAPITestCases(t *testing.T) {
	g := jetwaytest.Start(t)
	g.Publish(`{"name":"cased","pool":"p","route":{"method":"*","path":"/cased/{id}"},
		"backend":{"type":"mock","status":200,"json":{"id":"7","tier":"production","items":[{"sku":"a"}]},"headers":{"X-Tier":"prod"}},
		"auth":{"methods":["key"]},
		"sandbox":{"backend":{"type":"mock","status":200,"json":{"tier":"sandbox"}}},
		"cases":[
		  {"name":"reads an order","request":{"path":"/cased/7?x=1"},"expect":{"status":200,"headers":{"X-Tier":"prod"},"body":{"/id":"7","/items/0/sku":"a"}}},
		  {"name":"posts one","request":{"method":"POST","path":"/cased/8","body":{"qty":1}},"expect":{"status":200,"body":{"/tier":"production"}}}
		]}`)
	key := g.PutKeyedApp("tester")
	var out bytes.Buffer
	if err := apiTest(context.Background(), g.Client, "cased", g.URL, key, 5*time.Second, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "PASS  reads an order") || !strings.Contains(out.String(), "2 of 2 cases passed") {
		t.Errorf("%s", out.String())
	}
	// The sandbox tier answers otherwise: the same cases fail there, and
	// say how.
	sbKey, rec, err := registry.NewAPIKey()
	if err != nil {
		t.Fatal(err)
	}
	g.PutApps(&registry.App{ID: "sb", Status: registry.AppActive, Keys: []registry.AppKey{rec}, APIs: []string{"*"}, Sandbox: true})
	out.Reset()
	err = apiTest(context.Background(), g.Client, "cased", g.URL, sbKey, 5*time.Second, &out)
	if err == nil || !strings.Contains(out.String(), `body /tier: "sandbox", want "production"`) || !strings.Contains(out.String(), "body /id: missing") {
		t.Errorf("%v\n%s", err, out.String())
	}
	// Without a key: 401, not 200.
	out.Reset()
	if err := apiTest(context.Background(), g.Client, "cased", g.URL, "", 5*time.Second, &out); err == nil || !strings.Contains(out.String(), "status 401, want 200") {
		t.Errorf("%v\n%s", err, out.String())
	}
	// Cases that do not make sense are refused at publish.
	for _, cases := range []string{
		`[{"name":"a","request":{"path":"no-slash"},"expect":{"status":200}}]`,
		`[{"name":"a","request":{"path":"/x"},"expect":{"status":99}}]`,
		`[{"name":"a","request":{"path":"/x"},"expect":{"status":200}},{"name":"a","request":{"path":"/y"},"expect":{"status":200}}]`,
		`[{"name":"a","request":{"path":"/x"},"expect":{"status":200,"body":{"id":1}}}]`,
	} {
		if _, err := g.Client.Put(context.Background(), []byte(`{"name":"bad","pool":"p","route":{"path":"/bad"},"backend":{"type":"mock"},"cases":`+cases+`}`)); err == nil {
			t.Errorf("accepted cases %s", cases)
		}
	}
}
