package edge_test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// classify is the one definition of failure: a third party's 200 with
// {"code": 7} fails — retried, counted by the breaker, which opens, and
// in the metrics — while a 503 the entry does not list succeeds, and an
// answer slower than "slow" fails though it is sent.
func TestClassify(t *testing.T) {
	var calls atomic.Int64
	var mode atomic.Value
	mode.Store("code")
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		switch mode.Load() {
		case "503":
			w.WriteHeader(503)
			fmt.Fprint(w, `{"code":0}`)
		case "slow":
			time.Sleep(60 * time.Millisecond)
			fmt.Fprint(w, `{"code":0}`)
		default:
			fmt.Fprint(w, `{"code":7,"message":"insufficient funds"}`)
		}
	}))
	t.Cleanup(be.Close)
	g := newGateway(t)
	g.Publish(`{"name":"third","pool":"p","route":{"path":"/third"},"backend":{"type":"http","url":"` + be.URL + `"},
		"classify":{"failure_statuses":["500-502"],"failure_when":"response.json.code != 0","slow":"30ms"},
		"retry":{"attempts":2,"on":["5xx"],"backoff":"1ms","max_backoff":"2ms"},
		"breaker":{"consecutive_failures":2,"open_for":"1m"}}`)

	// A classified failure is retried (2 attempts), and the caller gets
	// the backend's own answer.
	if r := g.Do("GET", "/third", nil); r.Status != 200 || !strings.Contains(r.Body, "insufficient") {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("a classified failure took %d attempts, want 2 (retried)", n)
	}
	// The breaker counted both attempts: it is open now.
	if r := g.Do("GET", "/third", nil); r.Status != 503 || r.Code != "CIRCUIT_OPEN" {
		t.Fatalf("after two classified failures: %d %s", r.Status, r.Body)
	}
	var b bytes.Buffer
	_ = g.Metrics.WritePrometheus(&b)
	if !strings.Contains(b.String(), `jetway_requests_failed_total{api="third",pool="p",node="test-edge",role="edge",code="CLASSIFIED"} 1`) {
		t.Errorf("the edge did not count the classified failure:\n%s", grepLines(b.String(), "third"))
	}

	// A 503 the entry does not list is a success: neither retried nor
	// counted as failed; a slow answer fails.
	g.Publish(`{"name":"third2","pool":"p","route":{"path":"/third2"},"backend":{"type":"http","url":"` + be.URL + `"},
		"classify":{"failure_statuses":["500-502"],"slow":"30ms"},"retry":{"attempts":2,"on":["5xx"],"backoff":"1ms","max_backoff":"2ms"}}`)
	mode.Store("503")
	before := calls.Load()
	if r := g.Do("GET", "/third2", nil); r.Status != 503 || r.Code != "" {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	if n := calls.Load() - before; n != 1 {
		t.Errorf("a 503 classify calls a success was retried (%d attempts)", n)
	}
	mode.Store("slow")
	before = calls.Load()
	if r := g.Do("GET", "/third2", nil); r.Status != 200 {
		t.Fatalf("slow: %d", r.Status)
	}
	if n := calls.Load() - before; n != 2 {
		t.Errorf("a slow answer was not retried as a failure (%d attempts)", n)
	}
	b.Reset()
	_ = g.Metrics.WritePrometheus(&b)
	if strings.Contains(b.String(), `api="third2",pool="p",node="test-edge",role="edge",code="BACKEND_5XX"`) {
		t.Errorf("the 503 counted as a failure:\n%s", grepLines(b.String(), "third2"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
