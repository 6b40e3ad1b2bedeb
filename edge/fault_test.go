package edge_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/registry"
)

// setFault writes a drill and waits until the edge has it.
func setFault(t *testing.T, g *gateway, api string, f *registry.Fault) {
	t.Helper()
	got, err := g.Client.SetFault(context.Background(), api, f)
	if err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 3*time.Second, 2*time.Millisecond, func() error {
		if cur := g.EdgeWatcher.Current().Faults[api]; cur == nil || cur.Revision != got.Revision {
			return fmt.Errorf("edge has no drill %s@%d", api, got.Revision)
		}
		return nil
	})
}

// A drill aborts or delays the calls it covers — only those of its apps,
// headers and tier — before they reach a worker, shows in the response,
// the metrics and the access log, and ends by itself at its expiry or when
// turned off.
func TestFaultInjection(t *testing.T) {
	backend := newTierBackend(t, "ok")
	g := newGateway(t)
	liveKey := g.PutKeyedApp("live")
	otherKey := g.PutKeyedApp("other")
	testKey, testRec, _ := registry.NewAPIKey()
	g.PutApps(&registry.App{ID: "tester", Status: registry.AppActive, Keys: []registry.AppKey{testRec}, APIs: []string{"*"}, Sandbox: true})
	g.Publish(`{"name":"drill","pool":"p","route":{"path":"/drill"},"timeout":"300ms",
		"backend":{"type":"http","url":"` + backend.URL + `/prod"},"auth":{"methods":["key"]},
		"sandbox":{"backend":{"type":"http","url":"` + backend.URL + `/sb"}}}`)
	get := func(key string, hdr ...string) (int, string, string) {
		r := g.Do("GET", "/drill", nil, append([]string{"X-Api-Key", key}, hdr...)...)
		return r.Status, r.Body, r.Header.Get("X-Jetway-Fault")
	}
	soon := time.Now().Add(time.Hour)

	t.Run("abort, for the chosen app and header only", func(t *testing.T) {
		f := &registry.Fault{Apps: []string{"live"}, Headers: map[string]string{"X-Drill": "1"}, ExpiresAt: soon, Reason: "drill 7",
			Abort: &registry.FaultAbort{Percent: 100}}
		f.Abort.Status = 502
		setFault(t, g, "drill", f)
		before := len(backend.calls())
		if status, body, mark := get(liveKey, "X-Drill", "1"); status != 502 || mark != "abort" || !strings.Contains(body, `"FAULT_INJECTED"`) || !strings.Contains(body, "drill 7") {
			t.Fatalf("aborted call: %d %q %s", status, mark, body)
		}
		if len(backend.calls()) != before {
			t.Fatal("an aborted call reached the backend")
		}
		for _, c := range []struct {
			key string
			hdr []string
		}{{liveKey, nil}, {otherKey, []string{"X-Drill", "1"}}, {liveKey, []string{"X-Drill", "2"}}, {testKey, []string{"X-Drill", "1"}}} {
			if status, _, mark := get(c.key, c.hdr...); status != 200 || mark != "" {
				t.Fatalf("a call the drill does not cover (%v): %d %q", c.hdr, status, mark)
			}
		}
		var b bytes.Buffer
		if err := g.Metrics.WritePrometheus(&b); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{`jetway_faults_injected_total{api="drill",pool="p",node="test-edge",role="edge",kind="abort"} 1`,
			`jetway_requests_failed_total{api="drill",pool="p",node="test-edge",role="edge",code="FAULT_INJECTED"} 1`} {
			if !strings.Contains(b.String(), want) {
				t.Errorf("metrics lack %s", want)
			}
		}
	})
	t.Run("delay, and past the deadline a 504", func(t *testing.T) {
		setFault(t, g, "drill", &registry.Fault{ExpiresAt: soon, Delay: &registry.FaultDelay{Min: registry.Duration(80 * time.Millisecond), Percent: 100}})
		start := time.Now()
		if status, body, mark := get(liveKey); status != 200 || body != "ok" || mark != "delay" || time.Since(start) < 80*time.Millisecond {
			t.Fatalf("delayed call: %d %q %s after %v", status, mark, body, time.Since(start))
		}
		setFault(t, g, "drill", &registry.Fault{ExpiresAt: soon, Delay: &registry.FaultDelay{Min: registry.Duration(5 * time.Second), Percent: 100}})
		start = time.Now()
		// The 300 ms timeout cuts the 5 s delay: well before it, on a busy box too.
		if status, _, mark := get(liveKey); status != 504 || mark != "delay" || time.Since(start) > 3*time.Second {
			t.Fatalf("a delay past the deadline: %d %q after %v", status, mark, time.Since(start))
		}
	})
	t.Run("the sandbox tier only", func(t *testing.T) {
		f := &registry.Fault{ExpiresAt: soon, Sandbox: true, Abort: &registry.FaultAbort{Percent: 100}}
		f.Abort.Status = 503
		body := `{"drill":true}`
		f.Abort.JSON = []byte(body)
		setFault(t, g, "drill", f)
		if status, got, _ := get(testKey); status != 503 || got != body {
			t.Fatalf("sandbox call: %d %s", status, got)
		}
		if status, _, _ := get(liveKey); status != 200 {
			t.Fatalf("production call under a sandbox drill: %d", status)
		}
	})
	t.Run("a share of the calls", func(t *testing.T) {
		f := &registry.Fault{ExpiresAt: soon, Abort: &registry.FaultAbort{Percent: 30}}
		f.Abort.Status = 503
		setFault(t, g, "drill", f)
		aborted := 0
		for range 400 {
			if status, _, _ := get(liveKey); status == 503 {
				aborted++
			}
		}
		if aborted < 70 || aborted > 170 { // 120 expected; far outside is a wrong share
			t.Fatalf("%d of 400 aborted at 30%%", aborted)
		}
	})
	t.Run("expiry and off", func(t *testing.T) {
		f := &registry.Fault{ExpiresAt: time.Now().Add(300 * time.Millisecond), Abort: &registry.FaultAbort{Percent: 100}}
		f.Abort.Status = 503
		setFault(t, g, "drill", f)
		if status, _, _ := get(liveKey); status != 503 {
			t.Fatalf("before expiry: %d", status)
		}
		time.Sleep(time.Until(f.ExpiresAt))
		if status, _, mark := get(liveKey); status != 200 || mark != "" {
			t.Fatalf("after expiry: %d %q", status, mark)
		}
		f.ExpiresAt = soon
		setFault(t, g, "drill", f)
		if err := g.Client.ClearFault(context.Background(), "drill"); err != nil {
			t.Fatal(err)
		}
		natstest.CheckFor(t, 3*time.Second, 2*time.Millisecond, func() error {
			if status, _, _ := get(liveKey); status != 200 {
				return fmt.Errorf("after off: %d", status)
			}
			return nil
		})
	})
}

// A switch is checked when written: a delay past the longest timeout, an
// expiry in the past or over a week ahead, a bad header, neither delay nor
// abort.
func TestParseFaultProblems(t *testing.T) {
	now := time.Now()
	for name, tc := range map[string]struct{ doc, want string }{
		"nothing":   {`{"expires_at":"` + now.Add(time.Hour).Format(time.RFC3339) + `"}`, "delay"},
		"past":      {`{"expires_at":"` + now.Add(-time.Hour).Format(time.RFC3339) + `","abort":{"status":503,"percent":1}}`, "not in the future"},
		"far":       {`{"expires_at":"` + now.Add(200*time.Hour).Format(time.RFC3339) + `","abort":{"status":503,"percent":1}}`, "at most"},
		"delay":     {`{"expires_at":"` + now.Add(time.Hour).Format(time.RFC3339) + `","delay":{"min":"10m","percent":1}}`, "delay.min"},
		"range":     {`{"expires_at":"` + now.Add(time.Hour).Format(time.RFC3339) + `","delay":{"min":"1s","max":"10ms","percent":1}}`, "delay.max"},
		"percent":   {`{"expires_at":"` + now.Add(time.Hour).Format(time.RFC3339) + `","abort":{"status":503,"percent":0}}`, "percent"},
		"header":    {`{"expires_at":"` + now.Add(time.Hour).Format(time.RFC3339) + `","abort":{"status":503,"percent":1},"headers":{"bad name":"x"}}`, "headers.bad name"},
		"timestamp": {`{"expires_at":"soon","abort":{"status":503,"percent":1}}`, "expires_at"},
	} {
		_, err := registry.ParseFault("fault.x", []byte(tc.doc), now)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a problem with %q", name, err, tc.want)
		}
	}
	// Written around the CLI with an expiry years ahead: it ends a week
	// after it was written, on every node.
	written := now.Add(-time.Hour)
	sw, err := registry.ParseSwitchAt("fault.x", []byte(`{"expires_at":"2999-01-01T00:00:00Z","abort":{"status":503,"percent":1}}`), 7, written)
	if err != nil || !sw.Fault.ExpiresAt.Equal(written.Add(registry.MaxFaultFor)) {
		t.Fatalf("a switch of 2999: %v %v", err, sw)
	}
	if _, err := registry.ParseFault("fault.x", []byte(`{"expires_at":"`+now.Add(time.Hour).Format(time.RFC3339)+`","abort":{"status":503,"percent":0.004}}`), now); err == nil {
		t.Fatal("a percent that rounds to never was taken")
	}
	// Stored and expired: valid, and off.
	f, err := registry.ParseFault("fault.x", []byte(`{"expires_at":"2020-01-01T00:00:00Z","abort":{"status":503,"percent":1}}`), time.Time{})
	if err != nil || !f.Expired(now) {
		t.Fatalf("an expired stored switch: %v", err)
	}
}
