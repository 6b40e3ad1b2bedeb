package e2e

import (
	"encoding/json"
	"net/http"
	"syscall"
	"testing"
)

// SLA records survive a restart: calls served by a serve node, stopped
// (its minute under way is stored at shutdown) and started again on the
// same data, are in `jetway report`.
func TestReportCountsCallsAcrossARestart(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	srv := startNode(t, "serve-1", "serve", data)
	srv.waitReady(t)
	putAPI(t, srv.natsURL, entry("e2e.sla", "sla", "GET", "/sla", mockBackend("ok"), nil))
	waitBody(t, srv.edge+"/sla", "ok")
	for range 20 {
		if r := get(t, srv.edge+"/sla"); r.status != http.StatusOK {
			t.Fatalf("call: %v", r)
		}
	}
	srv.signal(t, syscall.SIGTERM)
	if code := srv.waitExit(t, exitTimeout); code != 0 {
		t.Fatalf("serve exited %d", code)
	}
	srv = startNode(t, "serve-2", "serve", data)
	srv.waitReady(t)
	res := jetway(t, "", "report", "--since", "1h", "--format", "json", "--api", "e2e.sla", "--nats", srv.natsURL)
	if res.code != 0 {
		t.Fatalf("jetway report: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	var rep map[string]any
	if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil {
		t.Fatalf("report json: %v\n%s", err, res.stdout)
	}
	b, _ := json.Marshal(rep)
	t.Logf("report: %.600s", b)
	if calls := findNumber(rep, "calls"); calls < 21 {
		t.Fatalf("the report counts %v calls of e2e.sla, want the 21 made before the restart:\n%s", calls, res.stdout)
	}
}

// findNumber is the first number under key k found in v, depth first.
func findNumber(v any, k string) float64 {
	switch x := v.(type) {
	case map[string]any:
		if n, ok := x[k].(float64); ok {
			return n
		}
		for _, c := range x {
			if n := findNumber(c, k); n >= 0 {
				return n
			}
		}
	case []any:
		for _, c := range x {
			if n := findNumber(c, k); n >= 0 {
				return n
			}
		}
	}
	return -1
}
