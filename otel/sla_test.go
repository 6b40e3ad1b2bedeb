package otel

import (
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/bus/natstest"
)

// Whose each failure is: the backend's own answers, BAD_GATEWAY and an
// open breaker are the backend's; every other failure the gateway's,
// OVERLOADED included; the caller's own refusals and the degrade switch
// are no call of the SLA.
func TestSLACauses(t *testing.T) {
	for code, want := range map[string]Cause{
		"": CauseBackend, "BACKEND_5XX": CauseBackend, "CLASSIFIED": CauseBackend, "BAD_GATEWAY": CauseBackend,
		"GATEWAY_TIMEOUT": CauseGateway, "NO_WORKERS": CauseGateway, "BUS_UNAVAILABLE": CauseGateway, "BUS_LOST": CauseGateway,
		"INTERNAL": CauseGateway, "FAULT_INJECTED": CauseGateway, "other": CauseGateway,
	} {
		if got := FailureCause(code); got != want {
			t.Errorf("failed %q: %s, want %s", code, got, want)
		}
	}
	for reason, want := range map[string]Cause{
		"OVERLOADED": CauseGateway, "CIRCUIT_OPEN": CauseBackend,
		"RATE_LIMITED": CauseRefused, "DEGRADED": CauseRefused, "UNAUTHENTICATED": CauseRefused, "FORBIDDEN": CauseRefused,
		"BAD_REQUEST": CauseRefused, "INVALID_REQUEST": CauseRefused, "PAYLOAD_TOO_LARGE": CauseRefused, "other": CauseRefused,
	} {
		if got := BlockCause(reason); got != want {
			t.Errorf("blocked %q: %s, want %s", reason, got, want)
		}
	}
}

// record adds n calls of an outcome to m, each with latency lat(i).
func record(m *Metrics, api string, n int, o Outcome, reason string, lat func(i int) time.Duration) {
	for i := range n {
		m.Record(api, "p", o, reason, lat(i))
	}
}

// Minutes of two nodes merge into one API's figures: counts add up,
// availability leaves out the backend's failures and the refusals, and
// the merged quantiles are within the histogram's 1 % of the exact ones.
func TestSLARecorderMinutesMerge(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var all []time.Duration
	lat := func(int) time.Duration {
		d := time.Duration(math.Exp(rng.NormFloat64()*0.8) * float64(20*time.Millisecond))
		all = append(all, d)
		return d
	}
	nodes := []*Metrics{NewMetrics("n1", "edge"), NewMetrics("n2", "edge")}
	recs := []*SLARecorder{}
	for i, m := range nodes {
		recs = append(recs, &SLARecorder{m: m, o: SLAOptions{Node: m.node, Backlog: 60}, boot: "b" + string(rune('0'+i)), prev: map[string]apiSnap{},
			cur: time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)})
	}
	var merged SLAStats
	for minute := range 3 {
		for i, m := range nodes {
			record(m, "orders.get", 900+minute*10+i, Succeeded, "", lat)
			record(m, "orders.get", 5, Failed, "", lat)                // backend 5xx: the backend's
			record(m, "orders.get", 3, Failed, "BAD_GATEWAY", lat)     // the backend's
			record(m, "orders.get", 2, Failed, "GATEWAY_TIMEOUT", lat) // the gateway's
			record(m, "orders.get", 1, Failed, "BUS_LOST", lat)        // "other": the gateway's
			record(m, "orders.get", 4, Blocked, "RATE_LIMITED", lat)   // the caller's
			record(m, "orders.get", 1, Blocked, "OVERLOADED", lat)     // the gateway's
			r := recs[i]
			r.closeMinute(r.cur.Add(time.Minute))
		}
	}
	for _, r := range recs {
		if len(r.backlog) != 3 {
			t.Fatalf("%s: %d minutes queued", r.o.Node, len(r.backlog))
		}
		for k, min := range r.backlog {
			if want := time.Date(2030, 1, 1, 10, k, 0, 0, time.UTC); !min.Minute.Equal(want) || len(min.APIs) != 1 {
				t.Fatalf("minute %d: %+v", k, min)
			}
			// The stored form reads back the same.
			b, _ := json.Marshal(min)
			var back SLAMinute
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			merged.Merge(back.APIs[0].SLAStats)
		}
	}
	succeeded := int64(0)
	for minute := range 3 {
		succeeded += int64(2*(900+minute*10) + 1)
	}
	if merged.Succeeded != succeeded {
		t.Errorf("succeeded %d, want %d", merged.Succeeded, succeeded)
	}
	if merged.Failed["BACKEND_5XX"] != 30 || merged.Failed["BAD_GATEWAY"] != 18 || merged.Failed["GATEWAY_TIMEOUT"] != 12 || merged.Failed["BUS_LOST"] != 6 {
		t.Errorf("failed %v", merged.Failed)
	}
	if merged.Blocked["RATE_LIMITED"] != 24 || merged.Blocked["OVERLOADED"] != 6 {
		t.Errorf("blocked %v", merged.Blocked)
	}
	if got, want := merged.Calls(), succeeded+30+18+12+6+24+6; got != want || merged.Latency.Total() != want {
		t.Errorf("calls %d, latencies %d, want %d", got, merged.Latency.Total(), want)
	}
	if got, want := merged.SLACalls(), succeeded+12+6+6; got != want {
		t.Errorf("SLA calls %d, want %d", got, want)
	}
	if got, want := merged.Availability(), float64(succeeded)/float64(succeeded+24); got != want {
		t.Errorf("availability %v, want %v", got, want)
	}
	slices.Sort(all)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		exact := all[int(math.Ceil(q*float64(len(all))))-1]
		got := merged.Latency.Quantile(q)
		if e := math.Abs(float64(got-exact)) / float64(exact); e > 0.011 {
			t.Errorf("p%v: %v, exact %v (%.2f %% off)", q*100, got, exact, e*100)
		}
	}
	var sum time.Duration
	for _, d := range all {
		sum += d
	}
	if merged.Latency.Sum != sum {
		t.Errorf("latency sum %v, want %v", merged.Latency.Sum, sum)
	}
	// A minute without calls stores nothing.
	recs[0].closeMinute(recs[0].cur.Add(time.Minute))
	if len(recs[0].backlog) != 3 {
		t.Errorf("an idle minute was queued: %d", len(recs[0].backlog))
	}
}

// A minute of many APIs is stored in parts below the bound.
func TestSLARecorderParts(t *testing.T) {
	m := NewMetrics("n1", "edge")
	for i := range 400 {
		api := "api" + string(rune('a'+i%26)) + "." + string(rune('a'+i/26))
		for k := range 2000 {
			m.Record(api, "p", Succeeded, "", time.Duration(k+1)*time.Millisecond) // many buckets each
		}
	}
	r := &SLARecorder{m: m, o: SLAOptions{Node: "n1", Backlog: 60}, boot: "b", prev: map[string]apiSnap{}, cur: time.Now().UTC().Truncate(time.Minute)}
	r.closeMinute(r.cur.Add(time.Minute))
	if len(r.backlog) < 2 {
		t.Fatalf("%d parts", len(r.backlog))
	}
	n := 0
	for i, p := range r.backlog {
		b, _ := json.Marshal(p)
		if p.Part != i || len(b) > maxPart+64<<10 {
			t.Errorf("part %d: #%d, %d bytes", i, p.Part, len(b))
		}
		n += len(p.APIs)
	}
	if n != 400 {
		t.Errorf("%d APIs in the parts", n)
	}
}

// The recorder stores its minutes in jetway_sla and ReadSLA reads them
// back, each once; minutes it could not store (no stream yet) are kept
// and stored once the stream is there; breaker openings it heard are in
// the minute.
func TestSLARecorderStreamRoundTrip(t *testing.T) {
	// The recorder's own minute timer must not fire amid the test's
	// minutes: start well inside a minute.
	if left := time.Until(time.Now().Truncate(time.Minute).Add(time.Minute)); left < 5*time.Second {
		time.Sleep(left + 100*time.Millisecond)
	}
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m := NewMetrics("n1", "edge")
	r, err := StartSLARecorder(m, SLAOptions{JS: js, Node: "n1", Breakers: nc})
	if err != nil {
		t.Fatal(err)
	}
	start := r.cur
	record(m, "orders.get", 10, Succeeded, "", func(int) time.Duration { return 5 * time.Millisecond })
	record(m, "orders.get", 1, Failed, "NO_WORKERS", func(int) time.Duration { return time.Millisecond })
	ev := `{"api":"orders.get","backend":"b","node":"w1","from":"closed","to":"open","reason":"5 failures","at":"2030-01-01T10:00:00Z","gen":3}`
	if err := nc.Publish(bus.BreakerSubject("orders", "orders.get"), []byte(ev)); err != nil {
		t.Fatal(err)
	}
	_ = nc.Publish(bus.BreakerSubject("orders", "orders.get"), []byte(`{"api":"orders.get","to":"closed","gen":4}`))
	_ = nc.Publish(bus.BreakerSubject("orders", "other"), []byte(ev)) // the subject's API is not the event's
	_ = nc.Flush()
	deadline := time.Now().Add(2 * time.Second)
	for {
		r.mu.Lock()
		n := len(r.breakers)
		r.mu.Unlock()
		if n == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// No stream yet: the minute is kept.
	r.closeMinute(start.Add(time.Minute))
	r.send(ctx)
	if len(r.backlog) != 1 {
		t.Fatalf("queued %d", len(r.backlog))
	}
	if _, err := ReadSLA(ctx, js, start, start.Add(time.Hour)); err != ErrNoSLAStream {
		t.Fatalf("read without a stream: %v", err)
	}
	if _, err := EnsureSLAStream(ctx, js, SLAStreamOptions{}); err != nil {
		t.Fatal(err)
	}
	st, err := EnsureSLAStream(ctx, js, SLAStreamOptions{}) // idempotent
	if err != nil {
		t.Fatal(err)
	}
	if cfg := st.CachedInfo().Config; cfg.MaxAge != DefaultSLAMaxAge || cfg.Discard != jetstream.DiscardOld || cfg.MaxBytes != DefaultSLAMaxBytes {
		t.Errorf("stream config %+v", cfg)
	}
	record(m, "orders.get", 7, Succeeded, "", func(int) time.Duration { return 5 * time.Millisecond })
	r.closeMinute(start.Add(2 * time.Minute))
	r.send(ctx)
	if len(r.backlog) != 0 {
		t.Fatalf("still queued %d", len(r.backlog))
	}
	// The same part sent again (an ack lost) is stored once.
	again := SLAMinute{Node: "n1", Boot: r.boot, Minute: start}
	b, _ := json.Marshal(again)
	if _, err := js.Publish(ctx, SLASubjectPrefix+"n1", b, jetstream.WithMsgID(again.msgID())); err != nil {
		t.Fatal(err)
	}
	// A record that claims another node than its subject is dropped.
	forged, _ := json.Marshal(SLAMinute{Node: "n2", Boot: "x", Minute: start, APIs: []SLAAPI{{API: "orders.get", SLAStats: SLAStats{Succeeded: 99}}}})
	if _, err := js.Publish(ctx, SLASubjectPrefix+"n1", forged); err != nil {
		t.Fatal(err)
	}
	record(m, "orders.get", 2, Failed, "", func(int) time.Duration { return 50 * time.Millisecond })
	r.Stop(ctx) // the minute under way
	r.Stop(ctx)

	got, err := ReadSLA(ctx, js, start, start.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("%d minutes: %+v", len(got), got)
	}
	var total SLAStats
	for _, min := range got {
		for _, a := range min.APIs {
			total.Merge(a.SLAStats)
		}
	}
	if total.Succeeded != 17 || total.Failed["NO_WORKERS"] != 1 || total.Failed["BACKEND_5XX"] != 2 || total.Latency.Total() != 20 {
		t.Errorf("read back %+v", total)
	}
	if br := got[0].Breakers; len(br) != 1 || br[0].Worker != "w1" || br[0].Gen != 3 || br[0].PoolToken != "orders" {
		t.Errorf("breakers %+v", br)
	}
	if !got[0].Minute.Equal(start) || !got[1].Minute.Equal(start.Add(time.Minute)) {
		t.Errorf("minutes %v %v", got[0].Minute, got[1].Minute)
	}
	// A period that ends before the records: nothing.
	if none, err := ReadSLA(ctx, js, start.Add(-time.Hour), start); err != nil || len(none) != 0 {
		t.Errorf("an earlier period: %d, %v", len(none), err)
	}
}

// The recorder as an edge runs it: on the edge user's own connection
// (its inbox prefix, its permissions), the stream made by the admin; the
// edge's minute under way is stored at Stop and the admin reads it back.
func TestSLARecorderAsEdgeUser(t *testing.T) {
	opts := natstest.DefaultOptions(t)
	opts.Users = []*server.User{
		{Username: bus.UserAdmin, Password: "a", Permissions: bus.RolePermissions(bus.UserAdmin)},
		{Username: bus.UserEdge, Password: "e", Permissions: bus.RolePermissions(bus.UserEdge)},
	}
	s := natstest.RunServerWithOptions(t, opts)
	admin := natstest.Connect(t, s, nats.UserInfo(bus.UserAdmin, "a"))
	violations := make(chan error, 8)
	edge := natstest.Connect(t, s, nats.UserInfo(bus.UserEdge, "e"), nats.CustomInboxPrefix(bus.InboxPrefix(bus.UserEdge)),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err }))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ajs, _ := jetstream.New(admin)
	if _, err := EnsureSLAStream(ctx, ajs, SLAStreamOptions{}); err != nil {
		t.Fatal(err)
	}
	ejs, _ := jetstream.New(edge)
	m := NewMetrics("e1", "edge")
	r, err := StartSLARecorder(m, SLAOptions{JS: ejs, Node: "e1", Breakers: edge})
	if err != nil {
		t.Fatal(err)
	}
	from := r.cur
	record(m, "orders.get", 3, Succeeded, "", func(int) time.Duration { return time.Millisecond })
	r.Stop(ctx)
	got, err := ReadSLA(ctx, ajs, from, from.Add(time.Hour))
	if err != nil || len(got) != 1 || got[0].APIs[0].Succeeded != 3 {
		t.Fatalf("read back %+v, %v", got, err)
	}
	select {
	case err := <-violations:
		t.Fatalf("the edge's recorder was refused: %v", err)
	default:
	}
}
