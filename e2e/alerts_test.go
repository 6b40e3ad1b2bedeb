package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetway-gw/jetway/bus/natstest"
)

// An alert rule fires once when an API's success rate drops, is posted to
// its webhook, and resolves once the API recovers.
func TestAlertFiresAndResolves(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var posted []map[string]any
	hook := newBackend(t, func(b *backend, w http.ResponseWriter, r *http.Request) {
		var ev map[string]any
		_ = json.NewDecoder(r.Body).Decode(&ev)
		mu.Lock()
		posted = append(posted, ev)
		mu.Unlock()
	})
	srv := startNode(t, "serve", "serve", "", "--demo")
	srv.waitLog(t, startTimeout, `"demo ready"`, func(l logLine) bool { return strings.HasPrefix(l.str("msg"), "demo ready") })
	srv.waitReady(t)

	nc, err := nats.Connect(srv.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	events := make(chan map[string]any, 16)
	if _, err := nc.Subscribe("jetway.alerts.>", func(m *nats.Msg) {
		var ev map[string]any
		if json.Unmarshal(m.Data, &ev) == nil {
			events <- ev
		}
	}); err != nil {
		t.Fatal(err)
	}
	rule := `{"name":"status-errors","kind":"success_rate_below","api":"demo.status","threshold":0.9,"window":"3s","min_calls":5,"webhook":"` + hook.URL + `/hook"}`
	if res := jetway(t, rule, "alert", "put", "-", "--nats", srv.natsURL); res.code != 0 {
		t.Fatalf("alert put: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	if res := jetway(t, "", "alert", "list", "--nats", srv.natsURL); res.code != 0 || !strings.Contains(res.stdout, "status-errors") {
		t.Fatalf("alert list: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	if res := jetway(t, `{"name":"bad","kind":"p99_above","api":"x"}`, "alert", "put", "-", "--nats", srv.natsURL); res.code == 0 || !strings.Contains(res.stderr, "latency") {
		t.Fatalf("invalid rule accepted: exit %d\n%s", res.code, res.stderr)
	}

	waitEvent := func(state string, keepCalling string) map[string]any {
		t.Helper()
		deadline := time.After(15 * time.Second)
		for {
			get(t, srv.edge+keepCalling)
			select {
			case ev := <-events:
				if ev["rule"] == "status-errors" && ev["state"] == state {
					return ev
				}
				t.Fatalf("unexpected event %v (want %s)", ev, state)
			case <-deadline:
				t.Fatalf("no %s event", state)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	ev := waitEvent("firing", "/v1/status/503")
	if ev["target"] != "demo.status" || !strings.Contains(ev["message"].(string), "success rate") {
		t.Errorf("firing event %v", ev)
	}
	// The judging node's heartbeats say it fires (the console shows it).
	natstest.CheckFor(t, 5*time.Second, 100*time.Millisecond, func() error {
		r := get(t, srv.admin+"/nodes")
		if !strings.Contains(string(r.body), `"alerts_firing"`) || !strings.Contains(string(r.body), `"status-errors demo.status"`) {
			return fmt.Errorf("/nodes: %s", r.body)
		}
		return nil
	})
	waitEvent("resolved", "/v1/status/200")
	natstest.CheckFor(t, 5*time.Second, 50*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(posted) < 2 || posted[0]["state"] != "firing" || posted[1]["state"] != "resolved" {
			return fmt.Errorf("webhook got %v", posted)
		}
		return nil
	})
}
