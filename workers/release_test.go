package workers_test

// Gray release (docs/channels.md), through a whole gateway against real
// httptest backends and a real nats-server.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/internal/jetwaytest"
	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/resilience"
)

func releaseAPI(name, path string, stable, canary *backend, release string) string {
	return `{"name":"` + name + `","pool":"p","route":{"method":"*","path":"` + path + `"},
		"channels":[{"name":"v1","backend":{"type":"http","url":"` + stable.URL + `"}},
		            {"name":"v2","backend":{"type":"http","url":"` + canary.URL + `"}}],
		"channel_policy":{"min_volume":100000},
		"release":` + release + `}`
}

func waitRelease(t *testing.T, g *jetwaytest.Gateway, api string, within time.Duration, ok func(*resilience.ReleaseState) bool) *resilience.ReleaseState {
	t.Helper()
	var last *resilience.ReleaseState
	natstest.CheckFor(t, within, 20*time.Millisecond, func() error {
		st, _, err := g.Client.ChannelState(context.Background(), api)
		if err != nil || st == nil {
			return fmt.Errorf("no state: %v", err)
		}
		last = st.Release
		if last == nil || !ok(last) {
			return fmt.Errorf("release: %+v", last)
		}
		return nil
	})
	return last
}

// Pending, the canary takes nothing; started, it takes about its
// percent, which rises each window the gates pass, to promotion. A
// sticky key keeps a caller on one side.
func TestReleaseRampsToPromotion(t *testing.T) {
	v1, v2 := newBackend(t, "v1"), newBackend(t, "v2")
	g := jetwaytest.Start(t)
	g.Publish(releaseAPI("shop", "/shop", v1, v2, `{"canary":"v2","steps":[20,60],"window":"3s","min_calls":5}`))
	waitRelease(t, g, "shop", 5*time.Second, func(r *resilience.ReleaseState) bool { return r.Stage == resilience.ReleasePending })
	for range 50 {
		if r := g.Do("GET", "/shop", nil); r.Status != 200 || !strings.HasPrefix(r.Body, "v1") {
			t.Fatalf("pending release: %d %q", r.Status, r.Body)
		}
	}
	if _, err := g.Client.SendRelease(context.Background(), "shop", resilience.ReleaseStart, "test"); err != nil {
		t.Fatal(err)
	}
	waitRelease(t, g, "shop", 5*time.Second, func(r *resilience.ReleaseState) bool { return r.Percent == 20 })
	v2.reset()
	canary := 0
	for range 400 {
		if r := g.Do("GET", "/shop", nil); strings.HasPrefix(r.Body, "v2") {
			canary++
		}
	}
	// Each call is drawn: 20 % of 400 is 80, and 40..240 is far outside
	// any honest draw's spread (σ = 8) unless the percent rose meanwhile
	// (a window is 3 s: the 400 calls take about one, more under -race).
	if canary < 40 || canary > 240 {
		t.Fatalf("the canary took %d of 400 calls at 20 %%", canary)
	}
	l := startLoad(g, "/shop", 5*time.Millisecond)
	waitRelease(t, g, "shop", 20*time.Second, func(r *resilience.ReleaseState) bool { return r.Stage == resilience.ReleasePromoted })
	l.stop()
	if n := l.failed.Load(); n != 0 {
		t.Fatalf("%d calls failed", n)
	}
	for range 20 {
		if r := g.Do("GET", "/shop", nil); !strings.HasPrefix(r.Body, "v2") {
			t.Fatalf("promoted, the stable still answers: %q", r.Body)
		}
	}
	hist, err := g.Client.ReleaseHistory(context.Background(), "shop")
	if err != nil {
		t.Fatal(err)
	}
	var steps []string
	for _, e := range hist {
		steps = append(steps, fmt.Sprintf("%s>%s@%g/%s", e.From, e.To, e.Percent, e.By))
	}
	if got := strings.Join(steps, " "); got != "pending>running@20/manual running>running@60/controller running>promoted@100/controller" {
		t.Fatalf("history: %s", got)
	}
}

// A canary that fails breaches the gate: its percent goes to 0 at once,
// with the figures, and callers are served by the stable after; an
// operator's rollback does the same on a healthy one.
func TestReleaseRollsBackOnABreach(t *testing.T) {
	v1, v2 := newBackend(t, "v1"), newBackend(t, "v2")
	v2.failing.Store(true)
	g := jetwaytest.Start(t)
	g.Publish(releaseAPI("cart", "/cart", v1, v2, `{"canary":"v2","steps":[50],"window":"1m","min_calls":5,"sticky":"header:X-User"}`))
	waitRelease(t, g, "cart", 5*time.Second, func(r *resilience.ReleaseState) bool { return r.Stage == resilience.ReleasePending })
	if _, err := g.Client.SendRelease(context.Background(), "cart", resilience.ReleaseStart, ""); err != nil {
		t.Fatal(err)
	}
	waitRelease(t, g, "cart", 5*time.Second, func(r *resilience.ReleaseState) bool { return r.Stage == resilience.ReleaseRunning })
	// A sticky caller is always on one side.
	sides := map[string]map[string]bool{}
	for i := range 60 {
		user := fmt.Sprint("u", i%6)
		r := g.Do("POST", "/cart", strings.NewReader("x"), "X-User", user)
		if sides[user] == nil {
			sides[user] = map[string]bool{}
		}
		sides[user][strings.Fields(r.Body + " ?")[0]] = true
	}
	for u, s := range sides {
		if len(s) != 1 {
			t.Fatalf("caller %s saw both sides: %v", u, s)
		}
	}
	st := waitRelease(t, g, "cart", 5*time.Second, func(r *resilience.ReleaseState) bool { return r.Stage == resilience.ReleaseRolledBack })
	if st.Percent != 0 || !strings.Contains(st.Reason, "breached a gate: error rate") {
		t.Fatalf("rolled back: %+v", st)
	}
	v2.reset()
	for i := range 40 {
		if r := g.Do("GET", "/cart", nil, "X-User", fmt.Sprint("u", i)); r.Status != 200 {
			t.Fatalf("after the rollback: %d %q", r.Status, r.Body)
		}
	}
	if n := v2.hits.Load(); n != 0 {
		t.Fatalf("the rolled back canary still got %d calls", n)
	}
}

// A release entry is checked at publish: the canary and shadow are
// channels, steps rise, gates compile.
func TestReleaseEntryChecks(t *testing.T) {
	base := `{"name":"x","pool":"p","route":{"path":"/x"},"channels":[{"name":"v1","backend":{"type":"mock"}},{"name":"v2","backend":{"type":"mock"}}],"release":%s}`
	for _, tc := range []struct{ release, path string }{
		{`{"canary":"v3"}`, "release.canary"},
		{`{"canary":"v2","shadow":"v2"}`, "release.shadow"},
		{`{"canary":"v2","steps":[50,10]}`, "release.steps[1]"},
		{`{"canary":"v2","gates":{"when":"canary.nope +"}}`, "release.gates.when"},
		{`{"canary":"v2","sticky":"cookie:x"}`, "release.sticky"},
		{`{"canary":"v2","match":"request.method =="}`, "release.match"},
	} {
		_, err := registry.ParseAPI("", []byte(fmt.Sprintf(base, tc.release)))
		if err == nil || !strings.Contains(err.Error(), tc.path) {
			t.Errorf("%s: %v, want a problem at %s", tc.release, err, tc.path)
		}
	}
}

// A release's shadow gets copies of the calls, never serves a caller, and
// its status mismatches and latencies show in the worker's metrics.
func TestReleaseShadowMetrics(t *testing.T) {
	v1, v2, v3 := newBackend(t, "v1"), newBackend(t, "v2"), newBackend(t, "v3")
	v3.failing.Store(true)
	g := jetwaytest.Start(t)
	g.Publish(`{"name":"feed","pool":"p","route":{"path":"/feed"},
		"channels":[{"name":"v1","backend":{"type":"http","url":"` + v1.URL + `"}},
		            {"name":"v2","backend":{"type":"http","url":"` + v2.URL + `"}},
		            {"name":"v3","backend":{"type":"http","url":"` + v3.URL + `"}}],
		"release":{"canary":"v2","shadow":"v3"}}`)
	for range 30 {
		if r := g.Do("GET", "/feed", nil); r.Status != 200 || !strings.HasPrefix(r.Body, "v1") {
			t.Fatalf("a caller got %d %q: only the stable serves a pending release", r.Status, r.Body)
		}
	}
	natstest.CheckFor(t, 5*time.Second, 20*time.Millisecond, func() error {
		if n := v3.hits.Load(); n != 30 {
			return fmt.Errorf("the shadow got %d copies of 30 calls", n)
		}
		return nil
	})
	var out strings.Builder
	natstest.CheckFor(t, 5*time.Second, 20*time.Millisecond, func() error {
		out.Reset()
		if err := g.Worker.WriteChannelMetrics(&out, "n1"); err != nil {
			return err
		}
		for _, want := range []string{
			`jetway_worker_channel_mismatches_total{api="feed",channel="v3",node="n1"} 30`,
			`jetway_worker_channel_calls_total{api="feed",channel="v3",outcome="failed",node="n1"} 30`,
			`jetway_worker_channel_calls_total{api="feed",channel="v1",outcome="ok",node="n1"} 30`,
			`jetway_worker_channel_duration_seconds_count{api="feed",channel="v3",node="n1"} 30`,
			`jetway_worker_release_percent{api="feed",canary="v2",stage="pending",node="n1"} 0`,
		} {
			if !strings.Contains(out.String(), want) {
				return fmt.Errorf("metrics lack %s", want)
			}
		}
		return nil
	})
}

// A gate may read the shadow's figures: copies whose status differs from
// the callers' answers roll the canary back. An operator's cut of the
// shadow stops the copies.
func TestReleaseGateOnShadowMismatches(t *testing.T) {
	v1, v2, v3 := newBackend(t, "v1"), newBackend(t, "v2"), newBackend(t, "v3")
	v3.failing.Store(true)
	g := jetwaytest.Start(t)
	g.Publish(`{"name":"news","pool":"p","route":{"path":"/news"},
		"channels":[{"name":"v1","backend":{"type":"http","url":"` + v1.URL + `"}},
		            {"name":"v2","backend":{"type":"http","url":"` + v2.URL + `"}},
		            {"name":"v3","backend":{"type":"http","url":"` + v3.URL + `"}}],
		"release":{"canary":"v2","shadow":"v3","steps":[50],"window":"1m","min_calls":5,"gates":{"when":"shadow.mismatches > 3.0"}}}`)
	waitRelease(t, g, "news", 5*time.Second, func(r *resilience.ReleaseState) bool { return r.Stage == resilience.ReleasePending })
	if _, err := g.Client.SendRelease(context.Background(), "news", resilience.ReleaseStart, ""); err != nil {
		t.Fatal(err)
	}
	waitRelease(t, g, "news", 5*time.Second, func(r *resilience.ReleaseState) bool { return r.Stage == resilience.ReleaseRunning })
	l := startLoad(g, "/news", 5*time.Millisecond)
	st := waitRelease(t, g, "news", 10*time.Second, func(r *resilience.ReleaseState) bool { return r.Stage == resilience.ReleaseRolledBack })
	l.stop()
	if !strings.Contains(st.Reason, `gate "shadow.mismatches > 3.0" holds`) {
		t.Fatalf("rolled back for: %s", st.Reason)
	}
	if err := g.Client.SetChannelOverride(context.Background(), "news", "v3", resilience.ChannelCut, ""); err != nil {
		t.Fatal(err)
	}
	waitChannel(t, g, "news", "v3", 5*time.Second, func(s *resilience.ChannelStatus) bool { return s.State == resilience.ChannelCut })
	v3.reset()
	for range 20 {
		g.Do("GET", "/news", nil)
	}
	time.Sleep(100 * time.Millisecond)
	if n := v3.hits.Load(); n != 0 {
		t.Fatalf("the cut shadow still got %d copies", n)
	}
}
