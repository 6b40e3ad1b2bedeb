package workers_test

// Channel sets (docs/channels.md), through a whole gateway against real
// httptest backends and a real nats-server: calls fail over to a healthy
// channel, the pool's controller cuts a failing one within a window or
// two, probes it once it is back and returns its share step by step,
// and every change is a revision the history lists.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/edge"
	"github.com/jetway-gw/jetway/internal/jetwaytest"
	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/resilience"
)

func channelAPI(name, path string, a, b *backend, policy string) string {
	return `{"name":"` + name + `","pool":"p","route":{"method":"*","path":"` + path + `"},
		"channels":[{"name":"a","backend":{"type":"http","url":"` + a.URL + `"}},
		            {"name":"b","backend":{"type":"http","url":"` + b.URL + `"}}],
		"channel_policy":` + policy + `}`
}

// load sends GETs to path until stop is called, and counts what the
// callers saw.
type load struct {
	ok, failed atomic.Int64
	firstErr   atomic.Value
	stop       func()
}

func startLoad(g *jetwaytest.Gateway, path string, every time.Duration) *load {
	l := &load{}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			r := jetwaytest.Do(g.T, g.URL, "GET", path, nil)
			if r.Status == 200 {
				l.ok.Add(1)
			} else {
				l.failed.Add(1)
				l.firstErr.CompareAndSwap(nil, fmt.Sprintf("%d %s", r.Status, r.Body))
			}
		}
	}()
	l.stop = func() { close(done); wg.Wait() }
	return l
}

// channelState waits for the stored state of api's channel to satisfy ok.
func waitChannel(t *testing.T, g *jetwaytest.Gateway, api, channel string, within time.Duration, ok func(*resilience.ChannelStatus) bool) *resilience.ChannelStatus {
	t.Helper()
	var last *resilience.ChannelStatus
	natstest.CheckFor(t, within, 20*time.Millisecond, func() error {
		st, _, err := g.Client.ChannelState(context.Background(), api)
		if err != nil {
			return err
		}
		last = st.Channel(channel)
		if last == nil || !ok(last) {
			return fmt.Errorf("channel %s: %+v", channel, last)
		}
		return nil
	})
	return last
}

// A failing provider: callers see no error (their GETs fail over), the
// controller cuts it, it gets no calls while cut, and once it answers
// again it comes back through probes and a doubling ramp. The history
// lists each step.
func TestChannelCutProbeAndRamp(t *testing.T) {
	a, b := newBackend(t, "a"), newBackend(t, "b")
	g := jetwaytest.Start(t)
	g.Publish(channelAPI("sms", "/sms", a, b, `{"window":"1s","min_volume":10,"base":"1s","max_cut":"2s","probes":3,"ramp_start":0.25}`))

	l := startLoad(g, "/sms", 5*time.Millisecond)
	defer l.stop()
	time.Sleep(300 * time.Millisecond)
	if a.hits.Load() == 0 || b.hits.Load() == 0 {
		t.Fatalf("calls do not share the channels: a %d, b %d", a.hits.Load(), b.hits.Load())
	}

	a.failing.Store(true)
	failedAt := time.Now()
	waitChannel(t, g, "sms", "a", 5*time.Second, func(s *resilience.ChannelStatus) bool { return s.State == resilience.ChannelCut })
	t.Logf("cut %v after the provider started failing", time.Since(failedAt).Round(time.Millisecond))
	if n := l.failed.Load(); n != 0 {
		t.Fatalf("%d calls failed although channel b was healthy; first: %v", n, l.firstErr.Load())
	}
	if st := waitChannel(t, g, "sms", "b", time.Second, func(*resilience.ChannelStatus) bool { return true }); st.State != resilience.ChannelAvailable {
		t.Fatalf("the healthy channel is %s", st.State)
	}

	// Cut, it takes nothing but its probes (which fail while it fails).
	a.failing.Store(false)
	waitChannel(t, g, "sms", "a", 10*time.Second, func(s *resilience.ChannelStatus) bool { return s.State == resilience.ChannelAvailable })
	if n := l.failed.Load(); n != 0 {
		t.Fatalf("%d calls failed; first: %v", n, l.firstErr.Load())
	}
	hist, err := g.Client.ChannelHistory(context.Background(), "sms")
	if err != nil {
		t.Fatal(err)
	}
	var steps []string
	for _, tr := range hist {
		if tr.Channel == "a" {
			steps = append(steps, fmt.Sprintf("%s>%s@%.2f", tr.From, tr.To, tr.Share))
		}
	}
	got := strings.Join(steps, " ")
	if !strings.HasPrefix(got, "available>cut@0.00 cut>probing@0.00") || !strings.HasSuffix(got, "probing>ramping@0.25 ramping>ramping@0.50 ramping>available@1.00") {
		t.Fatalf("history of channel a: %s", got)
	}
}

// A non-idempotent call that failed is not tried on another channel
// (failover safe, the default); with failover always it is.
func TestChannelFailoverOnlyWhenSafe(t *testing.T) {
	a, b := newBackend(t, "a"), newBackend(t, "b")
	a.failing.Store(true)
	g := jetwaytest.Start(t)
	g.Publish(channelAPI("pay", "/pay", a, b, `{"min_volume":1000}`))
	g.Publish(channelAPI("pay2", "/pay2", a, b, `{"min_volume":1000,"failover":"always"}`))
	var postFailed, getFailed, alwaysFailed int
	for range 40 {
		if r := g.Do("POST", "/pay", strings.NewReader("x")); r.Status != 200 {
			postFailed++
		}
		if r := g.Do("GET", "/pay", nil); r.Status != 200 {
			getFailed++
		}
		if r := g.Do("POST", "/pay2", strings.NewReader("x")); r.Status != 200 {
			alwaysFailed++
		}
	}
	if postFailed == 0 || getFailed != 0 || alwaysFailed != 0 {
		t.Fatalf("failed calls: POST %d (want some: not retried), GET %d, POST with failover always %d (want 0)", postFailed, getFailed, alwaysFailed)
	}
}

// Two failing channels: the controller cuts one and keeps the other, the
// scenario's last; an operator's cut beats it, and clearing the cut
// sends the channel to probing at once.
func TestChannelLastNeverCutAndManualOverride(t *testing.T) {
	a, b := newBackend(t, "a"), newBackend(t, "b")
	a.failing.Store(true)
	b.failing.Store(true)
	g := jetwaytest.Start(t)
	g.Publish(channelAPI("kyc", "/kyc", a, b, `{"window":"1s","min_volume":5,"base":"1h"}`))
	l := startLoad(g, "/kyc", 5*time.Millisecond)
	natstest.CheckFor(t, 5*time.Second, 20*time.Millisecond, func() error {
		st, _, err := g.Client.ChannelState(context.Background(), "kyc")
		if err != nil || st == nil {
			return fmt.Errorf("no state: %v", err)
		}
		cut := 0
		for _, c := range st.Channels {
			if c.State == resilience.ChannelCut {
				cut++
			}
		}
		if cut != 1 {
			return fmt.Errorf("%d channels cut", cut)
		}
		return nil
	})
	time.Sleep(1500 * time.Millisecond) // more windows: still one
	l.stop()
	st, _, _ := g.Client.ChannelState(context.Background(), "kyc")
	kept := ""
	for _, c := range st.Channels {
		if c.State == resilience.ChannelCut {
			continue
		}
		if kept != "" {
			t.Fatalf("states: %+v", st.Channels)
		}
		kept = c.Name
	}
	if kept == "" {
		t.Fatalf("both channels cut: %+v", st.Channels)
	}

	// The operator cuts the one the controller kept: beats automation.
	ctx := context.Background()
	if err := g.Client.SetChannelOverride(ctx, "kyc", kept, resilience.ChannelCut, "drill"); err != nil {
		t.Fatal(err)
	}
	s := waitChannel(t, g, "kyc", kept, 5*time.Second, func(s *resilience.ChannelStatus) bool { return s.State == resilience.ChannelCut })
	if s.Manual != resilience.ChannelCut {
		t.Fatalf("manual cut not marked: %+v", s)
	}
	if r := g.Do("GET", "/kyc", nil); r.Status != 503 || r.Code != "CIRCUIT_OPEN" {
		t.Fatalf("every channel cut: %d %s", r.Status, r.Body)
	}
	if err := g.Client.ClearChannelOverride(ctx, "kyc", kept); err != nil {
		t.Fatal(err)
	}
	waitChannel(t, g, "kyc", kept, 5*time.Second, func(s *resilience.ChannelStatus) bool {
		return s.State == resilience.ChannelProbing && s.Manual == ""
	})
}

// Two workers of the pool: exactly one holds the controller's lease, and
// when it stops the other takes over and goes on.
func TestChannelControllerFailover(t *testing.T) {
	a, b := newBackend(t, "a"), newBackend(t, "b")
	g := jetwaytest.Start(t, "p")
	w2 := g.AddWorker("p")
	g.Publish(channelAPI("id", "/id", a, b, `{"window":"1s","min_volume":5,"base":"1h"}`))
	l := startLoad(g, "/id", 5*time.Millisecond)
	defer l.stop()
	var first string
	natstest.CheckFor(t, 5*time.Second, 20*time.Millisecond, func() error {
		st, _, err := g.Client.ChannelState(context.Background(), "id")
		if err != nil || st == nil {
			return fmt.Errorf("no state: %v", err)
		}
		first = st.Leader
		return nil
	})
	// Whichever leads, stopping it hands the lead over.
	stop := g.Worker
	if w2.ID() == first {
		stop = w2
	} else if g.Worker.ID() != first {
		t.Fatalf("the state's leader %q is neither worker", first)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := stop.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	a.failing.Store(true)
	waitChannel(t, g, "id", "a", 10*time.Second, func(s *resilience.ChannelStatus) bool { return s.State == resilience.ChannelCut })
	st, _, _ := g.Client.ChannelState(context.Background(), "id")
	if st.Leader == first {
		t.Fatalf("the stopped worker %s still leads", first)
	}
}

// Late outcomes: a provider that answers 200 but whose deliveries fail
// is cut by the reports of those failures an app posts to the edge; an
// anonymous report, one for a channel the API lacks, or one for an API
// that does not authenticate its callers is refused.
func TestChannelLateOutcomesCut(t *testing.T) {
	a, b := newBackend(t, "a"), newBackend(t, "b")
	g := jetwaytest.Start(t)
	key, rec, _ := registry.NewAPIKey()
	if _, err := g.Client.PutApp(context.Background(), &registry.App{ID: "owner", Status: registry.AppActive, Keys: []registry.AppKey{rec}, APIs: []string{"*"}}); err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 2*time.Second, 2*time.Millisecond, func() error {
		if g.EdgeWatcher.Current().Apps["owner"] == nil {
			return fmt.Errorf("app not loaded")
		}
		return nil
	})
	g.Publish(`{"name":"sms2","pool":"p","route":{"method":"POST","path":"/sms2"},"auth":{"methods":["key"]},
		"channels":[{"name":"a","backend":{"type":"http","url":"` + a.URL + `"}},{"name":"b","backend":{"type":"http","url":"` + b.URL + `"}}],
		"channel_policy":{"window":"2s","min_volume":10,"base":"1h"}}`)
	g.Publish(channelAPI("open", "/open", a, b, `{}`))

	post := func(api, body string, hdr ...string) jetwaytest.Result {
		return g.Do("POST", "/_jetway/outcomes/"+api, strings.NewReader(body), hdr...)
	}
	if r := post("sms2", `{"outcomes":[{"call_id":"x","channel":"a","ok":false}]}`); r.Status != 401 {
		t.Fatalf("anonymous report: %d %s", r.Status, r.Body)
	}
	if r := post("sms2", `{"outcomes":[{"call_id":"x","channel":"zz","ok":false}]}`, "X-Api-Key", key); r.Status != 400 {
		t.Fatalf("unknown channel: %d %s", r.Status, r.Body)
	}
	if r := post("open", `{"outcomes":[{"call_id":"x","channel":"a","ok":false}]}`, "X-Api-Key", key); r.Status != 404 {
		t.Fatalf("an open api: %d %s", r.Status, r.Body)
	}
	if r := g.Do("GET", "/_jetway/outcomes/sms2", nil, "X-Api-Key", key); r.Status != 405 {
		t.Fatalf("GET: %d %s", r.Status, r.Body)
	}

	// The controller judges a channel from when it first knows it.
	waitChannel(t, g, "sms2", "a", 5*time.Second, func(*resilience.ChannelStatus) bool { return true })
	// The calls all succeed; their delivery reports on channel a fail.
	var failedOnA []string
	for range 40 {
		r := g.Do("POST", "/sms2", strings.NewReader("hi"), "X-Api-Key", key)
		if r.Status != 200 {
			t.Fatalf("call: %d %s", r.Status, r.Body)
		}
		if r.Header.Get("X-Jetway-Channel") == "a" {
			failedOnA = append(failedOnA, r.Header.Get("X-Request-Id"))
		}
	}
	if len(failedOnA) < 10 {
		t.Fatalf("only %d of 40 calls went to channel a", len(failedOnA))
	}
	// Made-up call ids count for nothing: channel b, reported failing
	// 150 times for calls it never served, stays available.
	var madeUp []string
	for i := range 50 {
		madeUp = append(madeUp, fmt.Sprintf(`{"call_id":"made-up-%d","channel":"b","ok":false}`, i))
	}
	for range 3 {
		if r := post("sms2", `{"outcomes":[`+strings.Join(madeUp, ",")+`]}`, "X-Api-Key", key); r.Status != 202 {
			t.Fatalf("report: %d %s", r.Status, r.Body)
		}
	}
	time.Sleep(2500 * time.Millisecond) // more than two windows
	if s := waitChannel(t, g, "sms2", "b", time.Second, func(*resilience.ChannelStatus) bool { return true }); s.State != resilience.ChannelAvailable {
		t.Fatalf("made-up outcomes cut channel b: %+v", s)
	}
	var outs []string
	for _, id := range failedOnA {
		outs = append(outs, `{"call_id":"`+id+`","channel":"a","ok":false}`)
	}
	if r := post("sms2", `{"outcomes":[`+strings.Join(outs, ",")+`]}`, "X-Api-Key", key); r.Status != 202 {
		t.Fatalf("report: %d %s", r.Status, r.Body)
	}
	waitChannel(t, g, "sms2", "a", 5*time.Second, func(s *resilience.ChannelStatus) bool { return s.State == resilience.ChannelCut })
}

// A scenario whose every channel is cut but one being probed is served
// by that one (a probe), not refused; a channel held available is not
// cut while it fails, and is the controller's again once the hold is
// cleared — though clearing makes no transition of its own.
func TestChannelAllCutAndHoldCleared(t *testing.T) {
	a, b := newBackend(t, "a"), newBackend(t, "b")
	g := jetwaytest.Start(t)
	g.Publish(channelAPI("otp", "/otp", a, b, `{"window":"1s","min_volume":5,"base":"1h","ramp_start":0.5}`))
	waitChannel(t, g, "otp", "b", 5*time.Second, func(*resilience.ChannelStatus) bool { return true })
	ctx := context.Background()
	for _, ch := range []string{"a", "b"} {
		if err := g.Client.SetChannelOverride(ctx, "otp", ch, resilience.ChannelCut, ""); err != nil {
			t.Fatal(err)
		}
		waitChannel(t, g, "otp", ch, 5*time.Second, func(s *resilience.ChannelStatus) bool { return s.State == resilience.ChannelCut })
	}
	if r := g.Do("GET", "/otp", nil); r.Code != "CIRCUIT_OPEN" {
		t.Fatalf("every channel cut: %d %s", r.Status, r.Body)
	}
	if err := g.Client.ClearChannelOverride(ctx, "otp", "b"); err != nil {
		t.Fatal(err)
	}
	waitChannel(t, g, "otp", "b", 5*time.Second, func(s *resilience.ChannelStatus) bool { return s.State == resilience.ChannelProbing })
	if r := g.Do("GET", "/otp", nil); r.Status != 200 || !strings.HasPrefix(r.Body, "b") {
		t.Fatalf("the probing channel is the only one: %d %s", r.Status, r.Body)
	}

	// a, cut by hand, is held available instead while it fails.
	a.failing.Store(true)
	if err := g.Client.SetChannelOverride(ctx, "otp", "a", resilience.ChannelAvailable, "trust it"); err != nil {
		t.Fatal(err)
	}
	waitChannel(t, g, "otp", "a", 5*time.Second, func(s *resilience.ChannelStatus) bool {
		return s.State == resilience.ChannelAvailable && s.Manual == resilience.ChannelAvailable
	})
	l := startLoad(g, "/otp", 5*time.Millisecond)
	defer l.stop()
	waitChannel(t, g, "otp", "b", 10*time.Second, func(s *resilience.ChannelStatus) bool { return s.State == resilience.ChannelAvailable })
	time.Sleep(1500 * time.Millisecond)
	if s := waitChannel(t, g, "otp", "a", time.Second, func(*resilience.ChannelStatus) bool { return true }); s.State != resilience.ChannelAvailable {
		t.Fatalf("a held channel was moved: %+v", s)
	}
	if err := g.Client.ClearChannelOverride(ctx, "otp", "a"); err != nil {
		t.Fatal(err)
	}
	waitChannel(t, g, "otp", "a", 10*time.Second, func(s *resilience.ChannelStatus) bool {
		return s.State == resilience.ChannelCut && s.Manual == ""
	})
}

// Canned probes: the controller probes a cut channel with the saved
// requests itself, so a channel comes back with no traffic at all.
func TestChannelCannedProbes(t *testing.T) {
	a, b := newBackend(t, "a"), newBackend(t, "b")
	g := jetwaytest.Start(t)
	g.Publish(channelAPI("kyc2", "/kyc2", a, b, `{"window":"1s","min_volume":5,"base":"1s","max_cut":"1s","probes":2,"ramp_start":1,
		"probe":"canned","probe_requests":[{"path":"/health","query":"deep=1"}]}`))
	waitChannel(t, g, "kyc2", "a", 5*time.Second, func(*resilience.ChannelStatus) bool { return true })
	a.failing.Store(true)
	l := startLoad(g, "/kyc2", 5*time.Millisecond)
	waitChannel(t, g, "kyc2", "a", 5*time.Second, func(s *resilience.ChannelStatus) bool { return s.State == resilience.ChannelCut })
	l.stop()
	a.failing.Store(false)
	before := a.hits.Load()
	waitChannel(t, g, "kyc2", "a", 10*time.Second, func(s *resilience.ChannelStatus) bool { return s.State == resilience.ChannelAvailable })
	if n := a.hits.Load() - before; n < 2 {
		t.Fatalf("the channel came back after %d canned probes, want at least 2", n)
	}
	// The callers' calls on the healthy channel were no probes.
	var m strings.Builder
	if err := g.Worker.WriteChannelMetrics(&m, "n"); err != nil {
		t.Fatal(err)
	}
	if want := `jetway_worker_channel_probes_total{api="kyc2",channel="b",node="n"} 0`; !strings.Contains(m.String(), want) {
		t.Fatalf("metrics lack %s:\n%s", want, m.String())
	}
	if _, err := registry.ParseAPI("", []byte(`{"name":"x","pool":"p","route":{"path":"/x"},"channels":[{"name":"a","backend":{"type":"mock"}}],
		"channel_policy":{"probe":"canned"}}`)); err == nil || !strings.Contains(err.Error(), "probe_requests") {
		t.Fatalf("canned probes without requests: %v", err)
	}
}

// A late outcome report counts as a request in flight at the edge: at
// its limit, the edge refuses it as it refuses calls.
func TestChannelLateOutcomesWithinEdgeLimit(t *testing.T) {
	a, b := newBackend(t, "a"), newBackend(t, "b")
	a.hangN.Store(1)
	b.hangN.Store(1)
	g := jetwaytest.StartWith(t, jetwaytest.Options{Edge: edge.Options{MaxInFlight: 1}})
	key, rec, _ := registry.NewAPIKey()
	if _, err := g.Client.PutApp(context.Background(), &registry.App{ID: "owner", Status: registry.AppActive, Keys: []registry.AppKey{rec}, APIs: []string{"*"}}); err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 2*time.Second, 2*time.Millisecond, func() error {
		if g.EdgeWatcher.Current().Apps["owner"] == nil {
			return fmt.Errorf("app not loaded")
		}
		return nil
	})
	g.Publish(`{"name":"sms3","pool":"p","route":{"path":"/sms3"},"auth":{"methods":["key"]},"timeout":"5s",
		"channels":[{"name":"a","backend":{"type":"http","url":"` + a.URL + `"}},{"name":"b","backend":{"type":"http","url":"` + b.URL + `"}}]}`)
	done := make(chan struct{})
	go func() { // holds the edge's one slot: its backend hangs
		defer close(done)
		jetwaytest.Do(t, g.URL, "GET", "/sms3", nil, "X-Api-Key", key)
	}()
	natstest.CheckFor(t, 2*time.Second, 5*time.Millisecond, func() error {
		if a.hits.Load()+b.hits.Load() == 0 {
			return fmt.Errorf("the call has not reached a backend")
		}
		return nil
	})
	r := g.Do("POST", "/_jetway/outcomes/sms3", strings.NewReader(`{"outcomes":[{"call_id":"x","channel":"a","ok":false}]}`), "X-Api-Key", key)
	if r.Status != 503 || r.Code != "OVERLOADED" {
		t.Fatalf("a report past the edge's limit: %d %s", r.Status, r.Body)
	}
	select { // release the held call, on whichever channel it went to
	case a.hang <- struct{}{}:
	case b.hang <- struct{}{}:
	}
	<-done
}
