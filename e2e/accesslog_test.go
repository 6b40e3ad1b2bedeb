package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
)

// TestAccessLogLosesNothingAtShutdown makes calls through serve with the
// default, buffered access log, stops it with SIGTERM at once, and finds
// one access line per call, with today's fields, in its output.
func TestAccessLogLosesNothingAtShutdown(t *testing.T) {
	t.Parallel()
	srv := startNode(t, "serve", "serve", "")
	srv.waitReady(t)
	putAPI(t, srv.natsURL, entry("access.log", "access", "GET", "/v1/access/{id}", mockBackend(`{"ok":true}`), nil))
	waitBody(t, srv.edge+"/v1/access/probe", `{"ok":true}`)

	const calls = 300
	ids := map[string]bool{}
	for i := range calls {
		r := get(t, fmt.Sprintf("%s/v1/access/%d", srv.edge, i))
		if r.status != http.StatusOK {
			t.Fatalf("call %d: %v", i, r)
		}
		ids[r.header.Get("X-Request-Id")] = true
	}
	srv.signal(t, syscall.SIGTERM)
	if code := srv.waitExit(t, exitTimeout); code != 0 {
		t.Fatalf("serve exited %d after SIGTERM, want 0", code)
	}
	seen := 0
	for _, s := range srv.output() {
		var l logLine
		if json.Unmarshal([]byte(s), &l) != nil || l.str("log") != "access" || !strings.HasPrefix(l.str("path"), "/v1/access/") || l.str("path") == "/v1/access/probe" {
			continue
		}
		if !ids[l.str("request_id")] {
			t.Fatalf("an access line for no call of this test: %s", s)
		}
		delete(ids, l.str("request_id"))
		seen++
		for _, k := range []string{"time", "level", "msg", "role", "request_id", "api", "method", "path", "status", "latency_us", "bytes", "client_ip"} {
			if _, ok := l[k]; !ok {
				t.Fatalf("access line without %q: %s", k, s)
			}
		}
		if l.str("msg") != "access" || l.str("role") != "serve" || l.str("api") != "access.log" || l.str("status") != "200" || l.str("method") != "GET" {
			t.Fatalf("access line %s", s)
		}
	}
	if seen != calls {
		t.Fatalf("%d access lines for %d calls after a clean shutdown", seen, calls)
	}
}
