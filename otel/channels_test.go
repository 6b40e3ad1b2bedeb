package otel

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/resilience"
)

// channelEvent is a channel change as a worker's controller publishes it
// (workers.control): the API and the resilience.ChannelTransition.
func channelEvent(api, ch string, from, to resilience.ChannelState, share float64, by, reason string) []byte {
	b, _ := json.Marshal(struct {
		API string `json:"api"`
		resilience.ChannelTransition
	}{api, resilience.ChannelTransition{Channel: ch, From: from, To: to, Share: share, By: by, Reason: reason,
		At: time.Now().UTC(), Window: resilience.ChannelWindow{Calls: 40, Failures: 30}}})
	return b
}

func TestParseChannelEvent(t *testing.T) {
	subj := bus.ChannelEventPrefix + bus.PoolToken("sms.pool") + ".sms"
	good := channelEvent("sms", "b", resilience.ChannelAvailable, resilience.ChannelCut, 0, "controller", "success rate 25.00%")
	ev, ok := ParseChannelEvent(subj, good)
	if !ok || ev.API != "sms" || ev.PoolToken != "sms:pool" || ev.Channel != "b" || ev.From != "available" || ev.To != "cut" ||
		ev.By != "controller" || ev.Reason != "success rate 25.00%" || ev.At.IsZero() {
		t.Fatalf("parsed %+v, %v", ev, ok)
	}
	long, _ := ParseChannelEvent(subj, channelEvent("sms", "b", "", resilience.ChannelCut, 0, "Robert'); DROP", strings.Repeat("é", 600)))
	if long.By != "" || len(long.Reason) != maxChannelReason || !strings.HasSuffix(long.Reason, "é") {
		t.Errorf("by %q, reason of %d bytes: a strange by is dropped, a long reason cut at a rune", long.By, len(long.Reason))
	}
	for name, c := range map[string]struct {
		subject string
		data    []byte
	}{
		"too big":          {subj, append(good[:len(good)-1:len(good)-1], []byte(`,"pad":"`+strings.Repeat("x", maxChannelEventBytes)+`"}`)...)},
		"not json":         {subj, []byte(`{"api":"sms",`)},
		"unknown state":    {subj, channelEvent("sms", "b", resilience.ChannelAvailable, "exploded", 0, "controller", "")},
		"unknown from":     {subj, channelEvent("sms", "b", "sideways", resilience.ChannelCut, 0, "controller", "")},
		"another api":      {bus.ChannelEventPrefix + "p.orders", good},
		"no api":           {bus.ChannelEventPrefix + "p", good},
		"another subject":  {bus.BreakerPrefix + "p.sms", good},
		"bad channel name": {subj, channelEvent("sms", "B/../x", resilience.ChannelAvailable, resilience.ChannelCut, 0, "controller", "")},
		"share above 1":    {subj, channelEvent("sms", "b", resilience.ChannelProbing, resilience.ChannelRamping, 2, "controller", "")},
		"share below 0":    {subj, channelEvent("sms", "b", resilience.ChannelProbing, resilience.ChannelRamping, -1, "controller", "")},
		"a release's step": {subj, []byte(`{"api":"sms","kind":"release","channel":"b","to":"cut","release":{"canary":"b","from":"10","to":"20"}}`)},
	} {
		if ev, ok := ParseChannelEvent(c.subject, c.data); ok {
			t.Errorf("%s: accepted %+v", name, ev)
		}
	}
}

// channel_cut fires when a channel is cut and resolves only when it is
// available again, from events a worker of the API's pool publishes on
// NATS, followed with an edge's user as cmd/jetway's alerts do; events of
// another pool, of a channel the entry does not list, or malformed change
// nothing.
func TestChannelCutAlertOverNATS(t *testing.T) {
	opts := natstest.DefaultOptions(t)
	opts.Users = []*server.User{
		{Username: bus.UserEdge, Password: "e", Permissions: bus.RolePermissions(bus.UserEdge)},
		{Username: "worker-p", Password: "w", Permissions: bus.RolePermissions(bus.UserWorker, "p")},
		{Username: "worker-q", Password: "w", Permissions: bus.RolePermissions(bus.UserWorker, "q")},
	}
	s := natstest.RunServerWithOptions(t, opts)
	violations := make(chan error, 8)
	onErr := nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err })
	edge := natstest.Connect(t, s, nats.UserInfo(bus.UserEdge, "e"), nats.CustomInboxPrefix(bus.InboxPrefix(bus.UserEdge)), onErr)
	wp := natstest.Connect(t, s, nats.UserInfo("worker-p", "w"), nats.CustomInboxPrefix(bus.InboxPrefix(bus.UserWorker, "p")), onErr)
	wq := natstest.Connect(t, s, nats.UserInfo("worker-q", "w"), nats.CustomInboxPrefix(bus.InboxPrefix(bus.UserWorker, "q")), onErr)

	// The registry as the alerts' node sees it: sms in pool p, channels a and b.
	entries := map[string]*registry.API{"sms": {Name: "sms", Pool: "p", Channels: []registry.Channel{{Name: "a"}, {Name: "b"}}}}
	listed := func(api, ch string) bool {
		e := entries[api]
		return e != nil && slices.ContainsFunc(e.Channels, func(c registry.Channel) bool { return c.Name == ch })
	}
	a := NewAlerts()
	var mu sync.Mutex
	heard := 0
	if _, err := FollowChannelEvents(edge, func(ev ChannelEvent) {
		mu.Lock()
		heard++
		mu.Unlock()
		// Only an event of the API's own pool, of a channel its entry lists.
		if e := entries[ev.API]; e != nil && bus.PoolToken(e.Pool) == ev.PoolToken && listed(ev.API, ev.Channel) {
			a.ObserveChannel(ev)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := edge.Flush(); err != nil {
		t.Fatal(err)
	}
	rules := map[string]*registry.AlertRule{}
	for _, doc := range []string{`{"name":"cuts","kind":"channel_cut","api":"sms"}`, `{"name":"all-cuts","kind":"channel_cut","api":"*"}`,
		`{"name":"other-cuts","kind":"channel_cut","api":"orders"}`} {
		r, err := registry.ParseAlert("", []byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		rules[r.Name] = r
	}
	serve := func(string) bool { return true }
	now := time.Now()
	// publish sends events as a worker's controller does, and waits until
	// the follower has heard want events in all (dropped ones included).
	publish := func(nc *nats.Conn, subject string, want int, evs ...[]byte) {
		t.Helper()
		for _, ev := range evs {
			if err := nc.Publish(subject, ev); err != nil {
				t.Fatal(err)
			}
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		natstest.CheckFor(t, 2*time.Second, 5*time.Millisecond, func() error {
			mu.Lock()
			defer mu.Unlock()
			if heard != want {
				return fmt.Errorf("heard %d events, want %d", heard, want)
			}
			return nil
		})
	}
	evaluate := func() []string {
		now = now.Add(time.Second)
		var out []string
		for _, e := range a.Evaluate(now, rules, serve) {
			out = append(out, e.Rule+" "+e.Target+" "+e.State+" "+e.Value+": "+e.Message)
		}
		return out
	}
	subj := bus.ChannelEventPrefix + "p.sms"

	// Events that must change nothing: another pool's worker speaking for
	// sms, a channel sms does not list, malformed ones (the follower never
	// hears those), and an available channel.
	publish(wq, bus.ChannelEventPrefix+"q.sms", 1, channelEvent("sms", "b", resilience.ChannelAvailable, resilience.ChannelCut, 0, "controller", "forged"))
	publish(wp, subj, 3,
		channelEvent("sms", "zz", resilience.ChannelAvailable, resilience.ChannelCut, 0, "controller", "not listed"),
		channelEvent("sms", "a", resilience.ChannelRamping, resilience.ChannelAvailable, 1, "controller", "ramp done"))
	_ = wp.Publish(subj, []byte(`{"api":"sms","channel":"b","to":"cut"`))
	_ = wp.Publish(subj, channelEvent("sms", "b", resilience.ChannelAvailable, "melted", 0, "controller", "unknown state"))
	_ = wp.Publish(subj, append([]byte(`{"api":"sms","channel":"b","to":"cut","reason":"`), append([]byte(strings.Repeat("x", 9000)), '"', '}')...))
	if got := evaluate(); len(got) != 0 {
		t.Fatalf("fired on events to ignore: %v", got)
	}

	// The controller cuts b: both rules that watch sms fire, naming the
	// API, the channel, who and why.
	cut := "success rate 25.00% < 90.00% over 40 calls (30 failed); probes in 5m0s"
	publish(wp, subj, 4, channelEvent("sms", "b", resilience.ChannelAvailable, resilience.ChannelCut, 0, "controller", cut))
	got := evaluate()
	want := []string{
		"all-cuts sms/b firing cut: channel b of api sms is cut by the controller: " + cut,
		"cuts sms/b firing cut: channel b of api sms is cut by the controller: " + cut,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("cut:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Probing and ramping: still not its full share, still firing, no repeat.
	publish(wp, subj, 6,
		channelEvent("sms", "b", resilience.ChannelCut, resilience.ChannelProbing, 0, "controller", "probing after a cut of 5m0s"),
		channelEvent("sms", "b", resilience.ChannelProbing, resilience.ChannelRamping, 0.0625, "controller", "5 of 5 probes passed; share 0.0625"))
	if got := evaluate(); len(got) != 0 {
		t.Fatalf("probing, ramping: %v", got)
	}
	if f := strings.Join(a.Firing(), ","); f != "all-cuts sms/b,cuts sms/b" {
		t.Fatalf("firing %s", f)
	}
	// An operator cuts a too.
	publish(wp, subj, 7, channelEvent("sms", "a", resilience.ChannelAvailable, resilience.ChannelCut, 0, "manual", "cut by the operator"))
	got = evaluate()
	want = []string{
		"all-cuts sms/a firing cut: channel a of api sms is cut by an operator (manual): cut by the operator",
		"cuts sms/a firing cut: channel a of api sms is cut by an operator (manual): cut by the operator",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("manual cut:\n%s", strings.Join(got, "\n"))
	}
	// b's ramp ends: available, resolved.
	publish(wp, subj, 8, channelEvent("sms", "b", resilience.ChannelRamping, resilience.ChannelAvailable, 1, "controller", "success rate 100.00% at share 0.5; available"))
	got = evaluate()
	want = []string{
		"all-cuts sms/b resolved available: channel b of api sms is available again (the controller: success rate 100.00% at share 0.5; available)",
		"cuts sms/b resolved available: channel b of api sms is available again (the controller: success rate 100.00% at share 0.5; available)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("available:\n%s", strings.Join(got, "\n"))
	}
	// a leaves the entry while cut: forgotten, its alerts resolve.
	entries["sms"].Channels = entries["sms"].Channels[1:]
	a.KeepChannels(listed)
	got = evaluate()
	if len(got) != 2 || !strings.Contains(got[0], "sms/a resolved") || !strings.Contains(got[1], "no longer in the api's channel set") {
		t.Fatalf("forgotten channel: %v", got)
	}
	if f := a.Firing(); len(f) != 0 {
		t.Fatalf("still firing: %v", f)
	}
	select {
	case err := <-violations:
		t.Fatalf("a worker or the edge was refused: %v", err)
	default:
	}
}

// A channel heard of in probing (the evaluator started after its cut)
// fires too, and says it is not yet available.
func TestChannelCutAlertFromProbing(t *testing.T) {
	a := NewAlerts()
	rules := map[string]*registry.AlertRule{"c": {Name: "c", Kind: registry.AlertChannelCut, API: "sms"}}
	a.ObserveChannel(ChannelEvent{API: "sms", Channel: "b", From: ChannelCut, To: ChannelRamping, Share: 0.25, By: "controller", Reason: "share 0.25"})
	a.ObserveChannel(ChannelEvent{API: "sms", Channel: "c", To: "gone"}) // unknown: ignored
	evs := a.Evaluate(time.Now(), rules, nil)
	if len(evs) != 1 || evs[0].State != "firing" || evs[0].Value != "ramping" || evs[0].Limit != "available" ||
		evs[0].Message != "channel b of api sms is ramping at share 0.25, not yet available (taken out by the controller: share 0.25; now the controller: share 0.25)" {
		t.Fatalf("events %+v", evs)
	}
}

// Calls by channel, the channels' states and the per-second records.
func TestChannelMetrics(t *testing.T) {
	m := NewMetrics("n1", "edge")
	for range 3 {
		m.Record("sms", "sms.p", Succeeded, "", time.Millisecond)
		m.RecordChannel("sms", "sms.p", "a", false)
	}
	m.Record("sms", "sms.p", Failed, "", time.Millisecond)
	m.RecordChannel("sms", "sms.p", "b", true)
	// More names than any entry can list count as other.
	for i := range maxChannelsPerAPI + 3 {
		m.RecordChannel("many", "p", fmt.Sprintf("c%d", i), false)
	}
	tok := bus.PoolToken("sms.p")
	m.ObserveChannel(ChannelEvent{API: "sms", PoolToken: tok, Channel: "b", To: ChannelCut})
	m.ObserveChannel(ChannelEvent{API: "sms", PoolToken: tok, Channel: "a", To: ChannelAvailable, Share: 1})
	m.ObserveChannel(ChannelEvent{API: "sms", PoolToken: tok, Channel: "c", To: ChannelRamping, Share: 0.125})
	m.ObserveChannel(ChannelEvent{API: "sms", PoolToken: tok, Channel: "c", To: "bogus"})       // ignored
	m.ObserveChannel(ChannelEvent{API: "sms", PoolToken: "q", Channel: "a", To: ChannelCut})    // another pool's: not shown
	m.ObserveChannel(ChannelEvent{API: "unseen", PoolToken: "p", Channel: "a", To: ChannelCut}) // no call counted here: not shown
	var b strings.Builder
	if err := m.WritePrometheus(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	l := `api="sms",pool="sms.p",node="n1",role="edge"`
	for _, want := range []string{
		`# TYPE jetway_channel_requests_total counter`,
		`jetway_channel_requests_total{` + l + `,channel="a",outcome="ok"} 3`,
		`jetway_channel_requests_total{` + l + `,channel="a",outcome="failed"} 0`,
		`jetway_channel_requests_total{` + l + `,channel="b",outcome="failed"} 1`,
		`jetway_channel_requests_total{api="many",pool="p",node="n1",role="edge",channel="other",outcome="ok"} 3`,
		`# TYPE jetway_channel_state gauge`,
		`jetway_channel_state{` + l + `,channel="a",state="available"} 1`,
		`jetway_channel_state{` + l + `,channel="a",state="cut"} 0`,
		`jetway_channel_state{` + l + `,channel="b",state="available"} 0`,
		`jetway_channel_state{` + l + `,channel="b",state="cut"} 1`,
		`jetway_channel_state{` + l + `,channel="c",state="ramping"} 1`,
		`jetway_channel_share{` + l + `,channel="a"} 1`,
		`jetway_channel_share{` + l + `,channel="b"} 0`,
		`jetway_channel_share{` + l + `,channel="c"} 0.125`,
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("missing %q", want)
		}
	}
	if n := strings.Count(out, `jetway_channel_requests_total{api="many"`); n != 2*(maxChannelsPerAPI+1) {
		t.Errorf("%d series of api many, want %d", n, 2*(maxChannelsPerAPI+1))
	}
	if strings.Contains(out, `api="unseen"`) || strings.Count(out, `jetway_channel_state{`+l) != 12 {
		t.Errorf("states of another pool or of an API without calls shown:\n%s", out)
	}
	// The second's record carries the calls by channel; the next one none.
	now := time.Unix(1_800_000_001, 0)
	var rec Record
	for _, r := range m.Tick(now) {
		if r.API == "sms" {
			rec = r
		}
	}
	if got := fmt.Sprint(rec.Channels); got != "[{a 3 0} {b 0 1}]" {
		t.Fatalf("record's channels %s", got)
	}
	m.Record("sms", "sms.p", Succeeded, "", time.Millisecond)
	if rs := m.Tick(now.Add(time.Second)); len(rs) != 1 || rs[0].Channels != nil {
		t.Fatalf("next second %+v", rs)
	}
	// A channel call counted after its API's second closed still counts.
	m.RecordChannel("sms", "sms.p", "a", false)
	if rs := m.Tick(now.Add(2 * time.Second)); len(rs) != 1 || fmt.Sprint(rs[0].Channels) != "[{a 1 0}]" {
		t.Fatalf("late channel call %+v", rs)
	}
	// The alerts keep no channels of the records they are sent.
	a := NewAlerts()
	a.ObserveRecords([]Record{rec}, rec.At)
	if got := a.seconds[rec.At.Unix()]["sms"]["n1"]; got.Channels != nil || got.Pass != 4 {
		t.Fatalf("kept %+v", got)
	}
}

// The metrics' channel states come, on an edge, through the SLA
// recorder's connection.
func TestSLARecorderFollowsChannelEvents(t *testing.T) {
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	m := NewMetrics("n1", "edge")
	m.Record("sms", "p", Succeeded, "", time.Millisecond)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	r, err := StartSLARecorder(m, SLAOptions{JS: js, Node: "n1", Breakers: nc})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop(t.Context())
	if err := nc.Publish(bus.ChannelEventPrefix+"p.sms", channelEvent("sms", "b", resilience.ChannelAvailable, resilience.ChannelCut, 0, "controller", "x")); err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 2*time.Second, 5*time.Millisecond, func() error {
		var b strings.Builder
		_ = m.WritePrometheus(&b)
		if !strings.Contains(b.String(), `jetway_channel_state{api="sms",pool="p",node="n1",role="edge",channel="b",state="cut"} 1`) {
			return fmt.Errorf("no cut state yet")
		}
		return nil
	})
}

// A release event as the controller publishes it parses; anything else on
// the subject does not. A rolled back release fires its alert until it
// runs again, and resolves when the API loses its release.
func TestReleaseRolledBackAlert(t *testing.T) {
	subj := bus.ChannelEventPrefix + "p.shop"
	ev, ok := ParseReleaseEvent(subj, []byte(`{"api":"shop","kind":"release","release":{"canary":"v2","from":"running","to":"rolled_back","percent":0,"by":"controller","reason":"step 2 (5 %) breached a gate: error rate 9.00 % > 5.00 %"}}`))
	if !ok || ev.API != "shop" || ev.PoolToken != "p" || ev.To != "rolled_back" || ev.Canary != "v2" {
		t.Fatalf("parsed %+v %v", ev, ok)
	}
	for _, bad := range []string{
		`{"api":"shop","channel":"a","from":"available","to":"cut"}`,                    // a channel's event
		`{"api":"shop","kind":"release","release":{"canary":"v2","to":"exploded"}}`,     // no such stage
		`{"api":"other","kind":"release","release":{"canary":"v2","to":"rolled_back"}}`, // not the subject's api
		`{"api":"shop","kind":"release","release":{"canary":"V 2","to":"rolled_back"}}`, // no channel name
	} {
		if _, ok := ParseReleaseEvent(subj, []byte(bad)); ok {
			t.Errorf("parsed %s", bad)
		}
	}
	a := NewAlerts()
	rules := map[string]*registry.AlertRule{"r": {Name: "r", Kind: registry.AlertReleaseRolledBack, API: "*"}}
	a.ObserveRelease(ev)
	evs := a.Evaluate(time.Now(), rules, nil)
	if len(evs) != 1 || evs[0].State != "firing" || evs[0].Target != "shop" ||
		evs[0].Message != "the release of api shop (canary v2) was rolled back by the controller: step 2 (5 %) breached a gate: error rate 9.00 % > 5.00 %" {
		t.Fatalf("events %+v", evs)
	}
	if evs := a.Evaluate(time.Now(), rules, nil); len(evs) != 0 {
		t.Fatalf("a repeat: %+v", evs)
	}
	a.ObserveRelease(ReleaseEvent{API: "shop", Canary: "v2", From: "rolled_back", To: "running", By: "manual", Reason: "started by ops"})
	if evs := a.Evaluate(time.Now(), rules, nil); len(evs) != 1 || evs[0].State != "resolved" {
		t.Fatalf("running again: %+v", evs)
	}
	a.ObserveRelease(ev)
	if evs := a.Evaluate(time.Now(), rules, nil); len(evs) != 1 || evs[0].State != "firing" {
		t.Fatalf("rolled back again: %+v", evs)
	}
	a.KeepReleases(func(string) bool { return false })
	if evs := a.Evaluate(time.Now(), rules, nil); len(evs) != 1 || evs[0].State != "resolved" {
		t.Fatalf("release removed: %+v", evs)
	}
}
