package bus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetway-gw/jetway/bus/natstest"
)

const testPeriod = 50 * time.Millisecond

// startBeater runs a Beater until the test ends (or the returned stop is
// called; stop waits for Run to return).
func startBeater(t *testing.T, nc *nats.Conn, hb Heartbeat, period time.Duration, status func() (int64, int)) (*Beater, func()) {
	t.Helper()
	b, err := NewHeartbeat(nc, hb, period, status)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	var stopped atomic.Bool
	stop := func() {
		if stopped.Swap(true) {
			return
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	t.Cleanup(stop)
	return b, stop
}

func startTracker(t *testing.T, nc *nats.Conn, period time.Duration) *Tracker {
	t.Helper()
	tr := NewTracker(nc, period)
	if err := tr.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Stop)
	return tr
}

func TestHeartbeatCarriesFields(t *testing.T) {
	s := natstest.RunServer(t)
	tr := startTracker(t, natstest.Connect(t, s), 10*time.Second)

	// The raw wire, to pin the JSON names other tools rely on.
	raw := make(chan *nats.Msg, 64)
	rawConn := natstest.Connect(t, s)
	sub, err := rawConn.ChanSubscribe(HeartbeatPrefix+">", raw)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := rawConn.Flush(); err != nil {
		t.Fatal(err)
	}

	var inFlight atomic.Int64
	inFlight.Store(7)
	started := time.Now().Add(-time.Minute)
	b, _ := startBeater(t, natstest.Connect(t, s), Heartbeat{
		Role: "worker", Pools: []string{"orders", "users"}, Version: "v1.2.3",
		Host: "box-1", Admin: "127.0.0.1:8081", Started: started,
	}, testPeriod, func() (int64, int) { return inFlight.Load(), 3 })

	var got Heartbeat
	natstest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		ns := tr.Nodes(time.Now())
		if len(ns) != 1 {
			return fmt.Errorf("nodes %+v, want one", ns)
		}
		got = ns[0]
		return nil
	})
	if got.ID != b.ID() || got.Role != "worker" || !reflect.DeepEqual(got.Pools, []string{"orders", "users"}) ||
		got.Version != "v1.2.3" || got.Host != "box-1" || got.Admin != "127.0.0.1:8081" ||
		got.InFlight != 7 || got.APIs != 3 || got.Stopping {
		t.Fatalf("heartbeat %+v", got)
	}
	if !got.Started.Equal(started) {
		t.Errorf("started %v, want %v", got.Started, started)
	}
	if got.Uptime < 60 || got.Uptime > 120 || got.UptimeDuration() < time.Minute {
		t.Errorf("uptime %v s", got.Uptime)
	}
	if got.At.Before(started) || time.Since(got.At) > time.Minute {
		t.Errorf("at %v", got.At)
	}
	if tr.Live("worker", time.Now()) != 1 || tr.Live("", time.Now()) != 1 || tr.Live("edge", time.Now()) != 0 {
		t.Errorf("live counts wrong")
	}

	// In-flight is read at every beat.
	inFlight.Store(42)
	natstest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if ns := tr.Nodes(time.Now()); len(ns) != 1 || ns[0].InFlight != 42 {
			return fmt.Errorf("nodes %+v, want in_flight 42", ns)
		}
		return nil
	})

	select {
	case m := <-raw:
		if m.Subject != HeartbeatSubject("worker", b.ID()) {
			t.Errorf("subject %q", m.Subject)
		}
		var fields map[string]any
		if err := json.Unmarshal(m.Data, &fields); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"id", "role", "pools", "version", "host", "admin", "started", "uptime_seconds", "in_flight", "apis", "at"} {
			if _, ok := fields[k]; !ok {
				t.Errorf("wire heartbeat lacks %q: %s", k, m.Data)
			}
		}
		if _, ok := fields["stopping"]; ok {
			t.Errorf("a regular beat says stopping: %s", m.Data)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no heartbeat on the wire")
	}
}

// A node whose beats stop (its connection is gone, no stopping beat) drops
// out once silent for three periods.
func TestHeartbeatSilentNodeDies(t *testing.T) {
	s := natstest.RunServer(t)
	tr := startTracker(t, natstest.Connect(t, s), testPeriod)
	beaterConn := natstest.Connect(t, s)
	startBeater(t, beaterConn, Heartbeat{Role: "edge"}, testPeriod, nil)
	natstest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if n := tr.Live("edge", time.Now()); n != 1 {
			return fmt.Errorf("%d live edges, want 1", n)
		}
		return nil
	})
	beaterConn.Close()
	natstest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if ns := tr.Nodes(time.Now()); len(ns) != 0 {
			return fmt.Errorf("still listed: %+v", ns)
		}
		return nil
	})
}

// The rule itself, on a synthetic clock: live up to three periods of
// silence, dead after.
func TestTrackerDeadAfterThreePeriods(t *testing.T) {
	tr := NewTracker(nil, time.Second)
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	tr.observe(Heartbeat{ID: "a", Role: "edge"}, t0)
	tr.observe(Heartbeat{ID: "b", Role: "worker"}, t0.Add(2*time.Second))
	if n := len(tr.Nodes(t0.Add(2900 * time.Millisecond))); n != 2 {
		t.Fatalf("%d nodes at 2.9 periods, want 2", n)
	}
	if n := tr.Live("edge", t0.Add(3100*time.Millisecond)); n != 0 {
		t.Fatalf("edge live after 3.1 periods of silence")
	}
	ns := tr.Nodes(t0.Add(3100 * time.Millisecond))
	if len(ns) != 1 || ns[0].ID != "b" {
		t.Fatalf("nodes %+v, want only b", ns)
	}
}

// A stopping beat removes the node at once, long before three periods.
func TestHeartbeatStoppingRemovesAtOnce(t *testing.T) {
	s := natstest.RunServer(t)
	tr := startTracker(t, natstest.Connect(t, s), time.Hour)
	_, stop := startBeater(t, natstest.Connect(t, s), Heartbeat{Role: "worker", Pools: []string{"p"}}, testPeriod, nil)
	natstest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if n := tr.Live("worker", time.Now()); n != 1 {
			return fmt.Errorf("%d live workers, want 1", n)
		}
		return nil
	})
	stop()
	natstest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if ns := tr.Nodes(time.Now()); len(ns) != 0 {
			return fmt.Errorf("still listed after its stopping beat: %+v", ns)
		}
		return nil
	})
}

func TestDiscoverFindsTwoBeaters(t *testing.T) {
	s := natstest.RunServer(t)
	w, _ := startBeater(t, natstest.Connect(t, s), Heartbeat{Role: "worker", Pools: []string{"p"}}, testPeriod, nil)
	e, _ := startBeater(t, natstest.Connect(t, s), Heartbeat{Role: "edge"}, testPeriod, nil)
	nc := natstest.Connect(t, s)
	natstest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		ns, err := Discover(context.Background(), nc, 2*testPeriod)
		if err != nil {
			return err
		}
		if len(ns) != 2 || ns[0].ID != e.ID() || ns[0].Role != "edge" || ns[1].ID != w.ID() || ns[1].Role != "worker" {
			return fmt.Errorf("discovered %+v, want edge %s then worker %s", ns, e.ID(), w.ID())
		}
		return nil
	})

	// A cancelled context ends the listen early, with its error.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ns, err := Discover(ctx, nc, time.Hour)
	if !errors.Is(err, context.Canceled) || ns == nil {
		t.Fatalf("Discover on a cancelled ctx: %v, %v", ns, err)
	}
}

// Beats that are malformed, oversized or on a subject that does not match
// their body are ignored.
func TestTrackerIgnoresBadBeats(t *testing.T) {
	s := natstest.RunServer(t)
	tr := startTracker(t, natstest.Connect(t, s), time.Hour)
	nc := natstest.Connect(t, s)
	good, _ := json.Marshal(Heartbeat{ID: "good", Role: "edge"})
	spoof, _ := json.Marshal(Heartbeat{ID: "other", Role: "edge"})
	dotted, _ := json.Marshal(Heartbeat{ID: "a.b", Role: "edge"})
	big, _ := json.Marshal(Heartbeat{ID: "big", Role: "edge", Version: string(make([]byte, maxHeartbeatSize))})
	for _, m := range []struct {
		subj string
		data []byte
	}{
		{HeartbeatSubject("edge", "x"), []byte("not json")},
		{HeartbeatSubject("edge", "x"), spoof},
		{HeartbeatPrefix + "edge.a.b", dotted},
		{HeartbeatSubject("edge", "big"), big},
		{HeartbeatSubject("edge", "good"), good}, // last: once seen, the rest were handled
	} {
		if err := nc.Publish(m.subj, m.data); err != nil {
			t.Fatal(err)
		}
	}
	natstest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if n := tr.Live("", time.Now()); n == 0 {
			return errors.New("good beat not seen yet")
		}
		return nil
	})
	if ns := tr.Nodes(time.Now()); len(ns) != 1 || ns[0].ID != "good" {
		t.Fatalf("nodes %+v, want only good", ns)
	}
}

// The table is capped: dead nodes go first, then the least recently heard.
func TestTrackerBounded(t *testing.T) {
	tr := NewTracker(nil, time.Second)
	tr.max = 3
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 5 {
		tr.observe(Heartbeat{ID: fmt.Sprintf("n%d", i), Role: "edge"}, t0.Add(time.Duration(i)*time.Millisecond))
	}
	ids := func(ns []Heartbeat) []string {
		var out []string
		for _, n := range ns {
			out = append(out, n.ID)
		}
		return out
	}
	if got := ids(tr.Nodes(t0)); !reflect.DeepEqual(got, []string{"n2", "n3", "n4"}) {
		t.Fatalf("nodes %v, want the three most recent", got)
	}
	// Ten seconds later all are dead: a newcomer evicts them, not a live one.
	tr.observe(Heartbeat{ID: "late", Role: "worker"}, t0.Add(10*time.Second))
	if got := ids(tr.Nodes(t0.Add(10 * time.Second))); !reflect.DeepEqual(got, []string{"late"}) {
		t.Fatalf("nodes %v", got)
	}
}

func TestNewHeartbeatValidates(t *testing.T) {
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	for _, hb := range []Heartbeat{{Role: ""}, {Role: "a.b"}, {Role: "edge", ID: "x>"}, {Role: "*"}} {
		if _, err := NewHeartbeat(nc, hb, 0, nil); err == nil {
			t.Errorf("NewHeartbeat(%+v) accepted", hb)
		}
	}
	if _, err := NewHeartbeat(nil, Heartbeat{Role: "edge"}, 0, nil); err == nil {
		t.Error("nil conn accepted")
	}
	b, err := NewHeartbeat(nc, Heartbeat{Role: "edge"}, 0, nil)
	if err != nil || len(b.ID()) != 22 || b.period != DefaultHeartbeatPeriod || b.hb.Host == "" || b.hb.Started.IsZero() {
		t.Fatalf("defaults not applied: %+v, %v", b, err)
	}
	// Run refuses to run twice at once.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	natstest.CheckFor(t, 5*time.Second, time.Millisecond, func() error {
		if !b.running.Load() {
			return errors.New("not running yet")
		}
		return nil
	})
	if err := b.Run(ctx); err == nil {
		t.Error("second Run accepted")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestTrackerServeHTTP(t *testing.T) {
	tr := NewTracker(nil, time.Hour)
	rec := httptest.NewRecorder()
	tr.ServeHTTP(rec, httptest.NewRequest("GET", "/nodes", nil))
	if rec.Body.String() != "[]\n" || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("empty: %q %q", rec.Body.String(), rec.Header().Get("Content-Type"))
	}
	tr.observe(Heartbeat{ID: "n1", Role: "worker", Pools: []string{"p"}, InFlight: 2}, time.Now())
	rec = httptest.NewRecorder()
	tr.ServeHTTP(rec, httptest.NewRequest("GET", "/nodes", nil))
	var got []Heartbeat
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ID != "n1" || got[0].InFlight != 2 || got[0].Pools[0] != "p" {
		t.Fatalf("got %+v", got)
	}
}

// A beat's fields are bounded whatever its sender claims: a forged beat
// may add a node of its role, not make one that fills /nodes or claims a
// pool that no name could be.
func TestTrackerBoundsFields(t *testing.T) {
	pools := []string{"ok", "x.>", ""}
	for i := range 1000 {
		pools = append(pools, fmt.Sprint("p", i))
	}
	long := string(bytes.Repeat([]byte("v"), 10000))
	hb := trackOne(t, Heartbeat{ID: "w", Role: "worker", Pools: pools, Version: long, Host: long, Admin: long, InFlight: -5, APIs: -1, Uptime: -3})
	if len(hb.Pools) != maxHeartbeatPools || hb.Pools[0] != "ok" || slices.Contains(hb.Pools, "x.>") || slices.Contains(hb.Pools, "") {
		t.Fatalf("pools %d: %v…", len(hb.Pools), hb.Pools[:3])
	}
	if len(hb.Version) > maxHeartbeatText || len(hb.Host) > maxHeartbeatText || len(hb.Admin) > maxHeartbeatText {
		t.Fatalf("texts of %d, %d, %d bytes", len(hb.Version), len(hb.Host), len(hb.Admin))
	}
	if hb.InFlight < 0 || hb.APIs < 0 || hb.Uptime < 0 {
		t.Fatalf("negative counts: %+v", hb)
	}
}

// trackOne publishes one beat to a fresh tracker and returns what it kept.
func trackOne(t *testing.T, beat Heartbeat) Heartbeat {
	t.Helper()
	s := natstest.RunServer(t)
	tr := startTracker(t, natstest.Connect(t, s), time.Hour)
	nc := natstest.Connect(t, s)
	b, _ := json.Marshal(beat)
	if err := nc.Publish(HeartbeatSubject(beat.Role, beat.ID), b); err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if tr.Live("", time.Now()) == 0 {
			return errors.New("beat not seen yet")
		}
		return nil
	})
	return tr.Nodes(time.Now())[0]
}

// A node's breakers open and alerts firing travel in its beats, at most
// MaxHeartbeatList each.
func TestHeartbeatCarriesHealth(t *testing.T) {
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	got := make(chan Heartbeat, 16)
	sub, err := nc.Subscribe(HeartbeatPrefix+">", func(m *nats.Msg) {
		var hb Heartbeat
		if json.Unmarshal(m.Data, &hb) == nil {
			got <- hb
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	nc.Flush()
	b, err := NewHeartbeat(nc, Heartbeat{Role: "worker", ID: "w1"}, testPeriod, nil)
	if err != nil {
		t.Fatal(err)
	}
	many := make([]string, 100)
	for i := range many {
		many[i] = fmt.Sprint("api", i)
	}
	b.Detail(func(hb *Heartbeat) { hb.Breakers, hb.Alerts = many, []string{"rule x"} })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = b.Run(ctx) }()
	select {
	case hb := <-got:
		if len(hb.Breakers) != MaxHeartbeatList || hb.Breakers[0] != "api0" || len(hb.Alerts) != 1 {
			t.Fatalf("beat %+v", hb)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no beat")
	}
}

// What a received beat may say of breakers and alerts is bounded: only the
// roles that hold them say them, at most MaxHeartbeatList entries each,
// cut and printable (they reach a terminal and the console).
func TestHeartbeatHealthIsBounded(t *testing.T) {
	many := make([]string, 100)
	for i := range many {
		many[i] = "\x1b[31mapi" + strings.Repeat("x", 300)
	}
	worker := boundHeartbeat(Heartbeat{ID: "w", Role: "worker", Breakers: many, Alerts: []string{"forged alert"}})
	if len(worker.Alerts) != 0 {
		t.Errorf("a worker's beat says alerts fire: %v", worker.Alerts)
	}
	if len(worker.Breakers) != MaxHeartbeatList || len(worker.Breakers[0]) > maxHeartbeatText || strings.ContainsRune(worker.Breakers[0], '\x1b') {
		t.Errorf("breakers not bounded: %d, %q", len(worker.Breakers), worker.Breakers[0])
	}
	edge := boundHeartbeat(Heartbeat{ID: "e", Role: "edge", Breakers: []string{"x"}, Alerts: []string{"r api"}})
	if len(edge.Breakers) != 0 || len(edge.Alerts) != 1 {
		t.Errorf("an edge's beat: breakers %v, alerts %v", edge.Breakers, edge.Alerts)
	}
}

// Serving: a live worker of the pool, or a serve node; not a worker of
// another pool, a stopping one or one silent too long.
func TestTrackerServing(t *testing.T) {
	tr := NewTracker(nil, time.Second)
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	tr.observe(Heartbeat{ID: "w1", Role: "worker", Pools: []string{"orders"}}, t0)
	tr.observe(Heartbeat{ID: "w2", Role: "worker", Pools: []string{"pay"}, Stopping: true}, t0)
	tr.observe(Heartbeat{ID: "e", Role: "edge"}, t0)
	if !tr.Serving("orders", t0.Add(time.Second)) || tr.Serving("pay", t0) || tr.Serving("other", t0) {
		t.Fatal("serving: want orders only")
	}
	if tr.Serving("orders", t0.Add(3100*time.Millisecond)) {
		t.Fatal("a worker silent for 3.1 periods still serves")
	}
	tr.observe(Heartbeat{ID: "s", Role: "serve"}, t0)
	if !tr.Serving("other", t0) {
		t.Fatal("a serve node serves every pool")
	}
}
