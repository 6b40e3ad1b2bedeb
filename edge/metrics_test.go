package edge_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// Metric values after a scripted mix of successes, errors and blocks.
func TestMetricsAfterScriptedMix(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("fail") != "" {
			w.WriteHeader(500)
		}
		io.WriteString(w, "x")
	}))
	defer backend.Close()
	g := newGateway(t, "p")
	g.Publish(`{"name":"mx","pool":"p","route":{"path":"/mx"},"backend":{"type":"http","url":"` + backend.URL + `"},
		"rate_limits":[{"limit":8,"window":"1m"}]}`)
	if _, err := g.Client.Put(t.Context(), []byte(`{"name":"mx.orphan","pool":"nobody","route":{"path":"/orphan"},"backend":{"type":"mock"}}`)); err != nil {
		t.Fatal(err)
	}
	for g.EdgeWatcher.Current().APIs["mx.orphan"] == nil {
		time.Sleep(time.Millisecond)
	}
	for i := 0; i < 5; i++ {
		g.Do("GET", "/mx", nil)
	}
	for i := 0; i < 3; i++ {
		g.Do("GET", "/mx?fail=1", nil)
	}
	for i := 0; i < 2; i++ {
		if r := g.Do("GET", "/mx", nil); r.Status != 429 {
			t.Fatalf("want 429, got %d", r.Status)
		}
	}
	g.Do("GET", "/orphan", nil)
	g.Do("GET", "/nope", nil) // unrouted: not an API's call

	var b strings.Builder
	if err := g.Metrics.WritePrometheus(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	l := `api="mx",pool="p",node="test-edge",role="edge"`
	for _, want := range []string{
		`jetway_requests_total{` + l + `} 10`,
		`jetway_requests_succeeded_total{` + l + `} 5`,
		`jetway_requests_failed_total{` + l + `,code="BACKEND_5XX"} 3`,
		`jetway_requests_blocked_total{` + l + `,reason="RATE_LIMITED"} 2`,
		`jetway_availability{` + l + `} 0.625`,
		`jetway_requests_failed_total{api="mx.orphan",pool="nobody",node="test-edge",role="edge",code="NO_WORKERS"} 1`,
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, `api=""`) {
		t.Error("unrouted request counted as an API")
	}
	recs := g.Metrics.Tick(time.Now().Add(time.Second))
	for _, r := range recs {
		if r.API == "mx" && (r.Pass != 8 || r.Block != 2 || r.Success != 5 || r.Error != 3) {
			t.Errorf("per-second record %+v", r)
		}
	}
}
