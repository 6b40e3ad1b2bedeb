package otel

import (
	"strings"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/registry"
)

func TestAlertsFireOnceAndResolve(t *testing.T) {
	a := NewAlerts()
	rules := map[string]*registry.AlertRule{
		"sr":  {Name: "sr", Kind: registry.AlertSuccessRateBelow, API: "*", Threshold: 0.9, Window: registry.Duration(10 * time.Second), MinCalls: 10},
		"lat": {Name: "lat", Kind: registry.AlertP99Above, API: "orders", Latency: registry.Duration(100 * time.Millisecond), Window: registry.Duration(10 * time.Second)},
		"br":  {Name: "br", Kind: registry.AlertBreakerOpened, API: "orders"},
		"nw":  {Name: "nw", Kind: registry.AlertNoWorkers, Pool: "p"},
	}
	t0 := time.Unix(1_800_000_000, 0)
	second := func(i int, pass, errs int64, p99 time.Duration) {
		for _, node := range []string{"a", "b"} { // two edges, each half the calls
			at := t0.Add(time.Duration(i) * time.Second)
			a.ObserveRecords([]Record{{At: at, API: "orders", Node: node, Pass: pass / 2, Error: errs / 2, P99: p99}}, at)
		}
	}
	workers := true
	serve := func(string) bool { return workers }
	for i := 0; i < 10; i++ {
		second(i, 20, 0, 20*time.Millisecond)
	}
	if ev := a.Evaluate(t0.Add(10*time.Second), rules, serve); len(ev) != 0 {
		t.Fatalf("healthy: %+v", ev)
	}
	// Errors and latency climb: success 150/200 = 0.75 < 0.9, p99 ~ 300ms.
	for i := 10; i < 20; i++ {
		second(i, 20, 10, 300*time.Millisecond)
	}
	a.ObserveBreaker("orders", "open")
	workers = false
	ev := a.Evaluate(t0.Add(15*time.Second), rules, serve)
	got := map[string]string{}
	for _, e := range ev {
		got[e.Rule+"|"+e.Target] = e.State
	}
	for _, k := range []string{"sr|orders", "lat|orders", "br|orders", "nw|p"} {
		if got[k] != "firing" {
			t.Errorf("%s: %q, want firing (events %+v)", k, got[k], ev)
		}
	}
	// Still failing: nothing new (repeats suppressed).
	if ev := a.Evaluate(t0.Add(16*time.Second), rules, serve); len(ev) != 0 {
		t.Fatalf("repeat: %+v", ev)
	}
	if got := strings.Join(a.Firing(), ","); got != "br orders,lat orders,nw p,sr orders" {
		t.Fatalf("firing: %s", got)
	}
	// Recovery.
	for i := 20; i < 40; i++ {
		second(i, 20, 0, 10*time.Millisecond)
	}
	a.ObserveBreaker("orders", "closed")
	workers = true
	ev = a.Evaluate(t0.Add(40*time.Second), rules, serve)
	if len(ev) != 4 {
		t.Fatalf("resolve: %+v", ev)
	}
	for _, e := range ev {
		if e.State != "resolved" || e.Message == "" {
			t.Errorf("event %+v", e)
		}
	}
	if f := a.Firing(); len(f) != 0 {
		t.Errorf("firing after all resolved: %v", f)
	}
}

func TestAlertNeedsMinCalls(t *testing.T) {
	a := NewAlerts()
	rules := map[string]*registry.AlertRule{"sr": {Name: "sr", Kind: registry.AlertSuccessRateBelow, API: "x", Threshold: 0.99}}
	t0 := time.Unix(1_800_000_000, 0)
	a.ObserveRecords([]Record{{At: t0, API: "x", Node: "n", Pass: 5, Error: 5}}, t0)
	if ev := a.Evaluate(t0.Add(2*time.Second), rules, func(string) bool { return true }); len(ev) != 0 {
		t.Fatalf("judged on 5 calls (min 20): %+v", ev)
	}
}

// Records come over NATS from any edge: impossible ones are dropped, so
// they can neither hide an alert nor make up a target.
func TestAlertsDropImpossibleRecords(t *testing.T) {
	a := NewAlerts()
	rules := map[string]*registry.AlertRule{"sr": {Name: "sr", Kind: registry.AlertSuccessRateBelow, API: "*", Threshold: 0.9, MinCalls: 1}}
	t0 := time.Unix(1_800_000_000, 0)
	a.ObserveRecords([]Record{
		{At: t0, API: "x", Node: "n", Pass: 100, Error: 50},   // honest: half fail
		{At: t0, API: "x", Node: "f1", Error: -50},            // would hide the errors
		{At: t0, API: "x", Node: "f2", Pass: 1, Error: 1000},  // more errors than calls
		{At: t0, API: "a.>", Node: "f3", Pass: 10, Error: 10}, // no API has that name
	}, t0)
	a.ObserveBreaker("x", "wide open")
	ev := a.Evaluate(t0.Add(2*time.Second), rules, func(string) bool { return true })
	if len(ev) != 1 || ev[0].Target != "x" || ev[0].State != "firing" || ev[0].Value != "0.5000" {
		t.Fatalf("events %+v, want only x firing at 0.5", ev)
	}
}

// The evaluator keeps only as many seconds of records as the longest rule
// window needs (a minute at least), however long it runs and whatever the
// records' dates: a record dated far ahead is dropped, not kept until its
// second comes.
func TestAlertsKeepOnlyTheWindow(t *testing.T) {
	a := NewAlerts()
	rules := map[string]*registry.AlertRule{"sr": {Name: "sr", Kind: registry.AlertSuccessRateBelow, API: "*", Threshold: 0.9,
		Window: registry.Duration(2 * time.Minute)}}
	t0 := time.Unix(1_800_000_000, 0)
	for i := range 3600 { // an hour of seconds, each evaluated
		now := t0.Add(time.Duration(i) * time.Second)
		a.ObserveRecords([]Record{{At: now, API: "x", Node: "n", Pass: 1}}, now)
		a.Evaluate(now, rules, func(string) bool { return true })
	}
	now := t0.Add(time.Hour)
	a.ObserveRecords([]Record{
		{At: now.Add(48 * time.Hour), API: "x", Node: "f", Pass: 1}, // forged: far ahead
		{At: now.Add(-time.Hour), API: "x", Node: "f", Pass: 1},     // older than any window
	}, now)
	a.mu.Lock()
	kept := len(a.seconds)
	a.mu.Unlock()
	if kept < 120 || kept > 125 {
		t.Fatalf("%d seconds of records kept, want the rule's 2-minute window", kept)
	}
	delete(rules, "sr")
	a.Evaluate(now, rules, func(string) bool { return true })
	if n := len(a.seconds); n > minKeep+1 {
		t.Fatalf("%d seconds kept with no rule, want at most a minute", n)
	}
}

func TestJobAlerts(t *testing.T) {
	a := NewAlerts()
	now := time.Unix(1_800_000_000, 0)
	rules := map[string]*registry.AlertRule{
		"queue": {Name: "queue", Kind: registry.AlertJobQueueAbove, API: "*", Jobs: 100},
		"age":   {Name: "age", Kind: registry.AlertJobAgeAbove, API: "reports", Age: registry.Duration(10 * time.Minute)},
		"dead":  {Name: "dead", Kind: registry.AlertDeadLettersAbove, API: "reports", DeadLetters: 2, Window: registry.Duration(time.Minute)},
	}
	fired := func(evs []AlertEvent) []string {
		var out []string
		for _, e := range evs {
			out = append(out, e.Rule+" "+e.Target+" "+e.State)
		}
		return out
	}
	a.ObserveJobs([]registry.JobQueue{{API: "reports", Queued: 50, Oldest: now.Add(-time.Minute), DeadLetters: 10}}, now)
	if got := fired(a.Evaluate(now, rules, nil)); len(got) != 0 {
		t.Fatalf("fired %v", got)
	}
	// The queue grows, its head ages, three jobs die within the window.
	now = now.Add(30 * time.Second)
	a.ObserveJobs([]registry.JobQueue{{API: "reports", Queued: 500, Oldest: now.Add(-20 * time.Minute), DeadLetters: 13},
		{API: "sms@sandbox", Queued: 101}}, now)
	got := fired(a.Evaluate(now, rules, nil))
	want := []string{"age reports firing", "dead reports firing", "queue reports firing", "queue sms@sandbox firing"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("fired %v, want %v", got, want)
	}
	// Drained, and no new dead letters for a window: each resolves, the
	// tier that left the queues too.
	now = now.Add(2 * time.Minute)
	a.ObserveJobs([]registry.JobQueue{{API: "reports", DeadLetters: 13}}, now)
	got = fired(a.Evaluate(now, rules, nil))
	want = []string{"age reports resolved", "dead reports resolved", "queue reports resolved", "queue sms@sandbox resolved"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("resolved %v, want %v", got, want)
	}
}

// on_standby fires per edge while its calls go to the standby cluster,
// once, and resolves when they are back.
func TestSiteAlert(t *testing.T) {
	a := NewAlerts()
	r, err := registry.ParseAlert("dr", []byte(`{"name":"dr","kind":"on_standby"}`))
	if err != nil {
		t.Fatalf("on_standby without an api: %v", err)
	}
	rules := map[string]*registry.AlertRule{"dr": r}
	now := time.Unix(1_800_000_000, 0)
	serve := func(string) bool { return true }
	a.ObserveSite("e1", "primary")
	if evs := a.Evaluate(now, rules, serve); len(evs) != 0 {
		t.Fatalf("on the primary: %+v", evs)
	}
	a.ObserveSite("e1", "standby")
	evs := a.Evaluate(now, rules, serve)
	if len(evs) != 1 || evs[0].State != "firing" || evs[0].Target != "e1" {
		t.Fatalf("moved: %+v", evs)
	}
	if evs := a.Evaluate(now.Add(time.Second), rules, serve); len(evs) != 0 {
		t.Fatalf("repeated: %+v", evs)
	}
	a.ObserveSite("e1", "primary")
	if evs := a.Evaluate(now.Add(2*time.Second), rules, serve); len(evs) != 1 || evs[0].State != "resolved" {
		t.Fatalf("back: %+v", evs)
	}
}
