package otel

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestMetricsScriptedMix(t *testing.T) {
	m := NewMetrics("n1", "edge")
	for i := 0; i < 90; i++ {
		m.Record("orders.get", "orders", Succeeded, "", 10*time.Millisecond)
	}
	for i := 0; i < 5; i++ {
		m.Record("orders.get", "orders", Failed, "GATEWAY_TIMEOUT", 800*time.Millisecond)
	}
	m.Record("orders.get", "orders", Failed, "", 20*time.Millisecond) // a backend 5xx
	for i := 0; i < 4; i++ {
		m.Record("orders.get", "orders", Blocked, "RATE_LIMITED", 50*time.Microsecond)
	}
	m.Record("users.get", "users", Blocked, "SOMETHING_NEW", time.Millisecond)

	var b strings.Builder
	if err := m.WritePrometheus(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	l := `api="orders.get",pool="orders",node="n1",role="edge"`
	for _, want := range []string{
		`jetway_requests_total{` + l + `} 100`,
		`jetway_requests_succeeded_total{` + l + `} 90`,
		`jetway_requests_passed_total{` + l + `} 96`,
		`jetway_requests_blocked_total{` + l + `,reason="RATE_LIMITED"} 4`,
		`jetway_requests_failed_total{` + l + `,code="GATEWAY_TIMEOUT"} 5`,
		`jetway_requests_failed_total{` + l + `,code="BACKEND_5XX"} 1`,
		`jetway_availability{` + l + `} 0.9375`, // 6 failed of 96 passed
		`jetway_request_duration_seconds_bucket{` + l + `,le="0.025"} 95`,
		`jetway_request_duration_seconds_count{` + l + `} 100`,
		`jetway_requests_blocked_total{api="users.get",pool="users",node="n1",role="edge",reason="other"} 1`,
		`# TYPE jetway_request_duration_seconds histogram`,
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("missing %q", want)
		}
	}
	if !strings.Contains(out, `jetway_request_duration_quantile_seconds{`+l+`,quantile="0.5"} 0.01`) {
		t.Errorf("p50 not ~10ms:\n%s", out)
	}

	// The second's record.
	now := time.Unix(1_800_000_001, 0)
	recs := m.Tick(now)
	if len(recs) != 2 {
		t.Fatalf("records %+v", recs)
	}
	var r Record
	for _, x := range recs {
		if x.API == "orders.get" {
			r = x
		}
	}
	if r.Pass != 96 || r.Block != 4 || r.Success != 90 || r.Error != 6 || r.At != time.Unix(1_800_000_000, 0) {
		t.Fatalf("record %+v", r)
	}
	if p := r.P99; p < 790*time.Millisecond || p > 810*time.Millisecond {
		t.Errorf("p99 %v, want ~800ms", p)
	}
	if p := r.P50; p < 9900*time.Microsecond || p > 10100*time.Microsecond {
		t.Errorf("p50 %v, want ~10ms", p)
	}
	if !strings.HasPrefix(r.Line(), "1800000000000|orders.get|96|4|90|6|") {
		t.Errorf("line %q", r.Line())
	}
	// The next second starts empty and only busy APIs get records.
	m.Record("orders.get", "orders", Succeeded, "", time.Millisecond)
	if recs := m.Tick(now.Add(time.Second)); len(recs) != 1 || recs[0].Pass != 1 {
		t.Fatalf("second tick %+v", recs)
	}
	if got := m.Records("orders.get", time.Time{}, time.Time{}, 0); len(got) != 2 {
		t.Fatalf("ring %+v", got)
	}
	if got := m.Records("", now, time.Time{}, 1); len(got) != 1 || got[0].Pass != 1 {
		t.Fatalf("ring with start and max %+v", got)
	}
}

func TestSecondRingBounds(t *testing.T) {
	var r secondRing
	r.init(3, 4)
	t0 := time.Unix(0, 0)
	for i := 0; i < 5; i++ {
		r.add(t0.Add(time.Duration(i)*time.Second), []Record{{API: "a", At: t0.Add(time.Duration(i) * time.Second)}, {API: "b"}})
	}
	if got := r.find("", time.Time{}, time.Time{}, 0); len(got) > 4 {
		t.Fatalf("kept %d records, budget 4", len(got))
	}
}

func TestAnswerQuery(t *testing.T) {
	m := NewMetrics("n1", "edge")
	now := time.Now().Truncate(time.Second)
	for i := 3; i > 0; i-- {
		m.Record("a", "p", Succeeded, "", time.Millisecond)
		m.Record("b", "p", Succeeded, "", time.Millisecond)
		m.Tick(now.Add(-time.Duration(i) * time.Second))
	}
	var rs []Record
	if err := json.Unmarshal(m.AnswerQuery([]byte(`{"api":"a","seconds":60}`), now), &rs); err != nil {
		t.Fatal(err)
	}
	if len(rs) != 3 || rs[0].API != "a" || rs[0].Node != "n1" || !rs[0].At.Before(rs[2].At) {
		t.Fatalf("records %+v, want a's three seconds, oldest first", rs)
	}
	if err := json.Unmarshal(m.AnswerQuery([]byte(`{"api":"a","seconds":3}`), now), &rs); err != nil || len(rs) != 2 {
		t.Fatalf("last 3 seconds: %+v %v", rs, err)
	}
	for _, q := range []string{`nope`, `{"seconds":5}`} {
		if b := m.AnswerQuery([]byte(q), now); b != nil {
			t.Errorf("query %s answered %s", q, b)
		}
	}
}
