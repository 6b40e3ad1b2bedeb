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
			time.Sleep(600 * time.Millisecond) // twice "slow": a fast answer on a busy box stays under it
			fmt.Fprint(w, `{"code":0}`)
		default:
			fmt.Fprint(w, `{"code":7,"message":"insufficient funds"}`)
		}
	}))
	t.Cleanup(be.Close)
	g := newGateway(t)
	g.Publish(`{"name":"third","pool":"p","route":{"path":"/third"},"backend":{"type":"http","url":"` + be.URL + `"},
		"classify":{"failure_statuses":["500-502"],"failure_when":"response.json.code != 0","slow":"300ms"},
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
		"classify":{"failure_statuses":["500-502"],"slow":"300ms"},"retry":{"attempts":2,"on":["5xx"],"backoff":"1ms","max_backoff":"2ms"}}`)
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

// Regressions of the classify review: a refresh never keeps a classified
// failure; a fallback API's own verdict counts; a backend's jetway-*
// header in any case never reaches the caller or passes for the verdict.
func TestClassifyReview(t *testing.T) {
	var bad atomic.Bool
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/lo" {
			w.Header()["jetway-outcome"] = []string{"ok"}
			w.WriteHeader(500)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if bad.Load() || r.URL.Path == "/fb2" {
			fmt.Fprint(w, `{"code":7,"from":"`+r.URL.Path+`"}`)
			return
		}
		fmt.Fprint(w, `{"code":0}`)
	}))
	t.Cleanup(be.Close)
	g := newGateway(t)
	const cls = `"classify":{"failure_when":"response.json.code != 0"}`
	g.Publish(`{"name":"cr","pool":"p","route":{"path":"/cr"},"backend":{"type":"http","url":"` + be.URL + `/cr"},` + cls + `,
		"cache":{"ttl":"100ms","stale_while_revalidate":"1h","stale_if_error":"1h"}}`)
	g.Do("GET", "/cr", nil)
	bad.Store(true)
	time.Sleep(150 * time.Millisecond)
	g.Do("GET", "/cr", nil) // stale: a refresh, which fails
	time.Sleep(100 * time.Millisecond)
	if r := g.Do("GET", "/cr", nil); strings.Contains(r.Body, `"code":7`) {
		t.Errorf("a refresh kept a classified failure: %q %s", r.Header.Get("X-Cache"), r.Body)
	}
	bad.Store(false)

	g.Publish(`{"name":"fb2","pool":"p","route":{"path":"/fb2"},"backend":{"type":"http","url":"` + be.URL + `/fb2"},` + cls + `}`)
	g.Publish(`{"name":"fa","pool":"p","route":{"path":"/fa"},"backend":{"type":"http","url":"` + be.URL + `/fb2"},` + cls + `,
		"fallback":{"on":["5xx"],"api":"fb2","static":{"status":200,"body":"sorry"}}}`)
	if r := g.Do("GET", "/fa", nil); r.Body != "sorry" {
		t.Errorf("the fallback API's classified failure was taken as the answer: %s", r.Body)
	}

	g.Publish(`{"name":"lo","pool":"p","route":{"path":"/lo"},"backend":{"type":"http","url":"` + be.URL + `/lo"},"classify":{}}`)
	if r := g.Do("GET", "/lo", nil); r.Header.Get("Jetway-Outcome") != "" || r.Status != 500 {
		t.Errorf("a backend's jetway-outcome: %d %v", r.Status, r.Header)
	}

}

// An answer failure_when cannot read (not JSON) fails: a backend does not
// escape the condition by answering something else.
func TestClassifyUnreadableAnswerFails(t *testing.T) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<h1>oops</h1>")
	}))
	t.Cleanup(be.Close)
	g := newGateway(t)
	g.Publish(`{"name":"html","pool":"p","route":{"path":"/html"},"backend":{"type":"http","url":"` + be.URL + `"},
		"classify":{"failure_when":"response.json.code != 0"}}`)
	g.Do("GET", "/html", nil)
	var b bytes.Buffer
	_ = g.Metrics.WritePrometheus(&b)
	if !strings.Contains(b.String(), `jetway_requests_failed_total{api="html",pool="p",node="test-edge",role="edge",code="CLASSIFIED"} 1`) {
		t.Errorf("an unreadable answer was not counted failed:\n%s", grepLines(b.String(), `api="html"`))
	}
}
