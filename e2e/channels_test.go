package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/bus/natstest"
)

// Channel sets (docs/channels.md) with real processes: a nats-server whose
// users are the roles' (the admin for the CLI, the edge's, and one user of
// the pool's workers, narrowed to that pool), an edge, and two worker
// processes of the pool. Two providers are httptest servers whose failure
// is scripted by the test; a steady load of GETs goes through the edge, and
// the channels' states are read and changed with `jetway channel` only.

const (
	chanPool   = "chp"
	chanAPI    = "chp.sms"
	chanPath   = "/v1/chp/sms"
	chanWindow = time.Second
	// chanPolicy: 1 s windows, cut after a failing window of 10 calls,
	// probed after 1 s (2 s at most), 3 probes a round, ramp 0.25 → 0.5 → 1.
	chanPolicy = `{"window":"1s","min_volume":10,"base":"1s","max_cut":"2s","probes":3,"ramp_start":0.25}`
	chanProbes = 3
	chanRate   = 200 // GETs a second
)

// provider is a scripted HTTP backend: it answers "<name> ok", or 503
// while failing. It records when it was last called.
type provider struct {
	*backend
	name    string
	failing atomic.Bool
	last    atomic.Int64 // unix nanoseconds of the last call
}

func newProvider(t *testing.T, name string) *provider {
	t.Helper()
	p := &provider{name: name}
	p.backend = newBackend(t, func(_ *backend, w http.ResponseWriter, _ *http.Request) {
		p.last.Store(time.Now().UnixNano())
		if p.failing.Load() {
			http.Error(w, name+" down", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, name+" ok")
	})
	return p
}

func (p *provider) lastCall() time.Time { return time.Unix(0, p.last.Load()) }

// chanDeploy is a split deployment: a nats-server with the roles' users,
// an edge, and workers of one pool connected as that pool's user.
type chanDeploy struct {
	ns      *server.Server
	admin   string // the server's URL with the admin's credentials (the CLI's)
	edge    *node
	workers []*node
}

func startChanDeploy(t *testing.T, workers int) *chanDeploy {
	t.Helper()
	o := natstest.DefaultOptions(t)
	poolUser := "worker-" + chanPool
	o.Users = []*server.User{
		{Username: bus.UserAdmin, Password: "admin-pw", Permissions: bus.RolePermissions(bus.UserAdmin)},
		{Username: bus.UserEdge, Password: "edge-pw", Permissions: bus.RolePermissions(bus.UserEdge)},
		{Username: poolUser, Password: "pool-pw", Permissions: bus.RolePermissions(bus.UserWorker, chanPool)},
	}
	ns := natstest.RunServerWithOptions(t, o)
	withUser := func(user, pw string) string {
		return strings.Replace(ns.ClientURL(), "nats://", "nats://"+user+":"+pw+"@", 1)
	}
	d := &chanDeploy{ns: ns, admin: withUser(bus.UserAdmin, "admin-pw")}
	// The CLI, as the admin, creates the buckets (the channels' too) that
	// the edge's and the workers' users may not create.
	if res := jetway(t, "", "api", "list", "--nats", d.admin); res.code != 0 {
		t.Fatalf("api list: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	d.edge = startNode(t, "edge", "edge", "", "--nats", withUser(bus.UserEdge, "edge-pw"))
	for i := range workers {
		d.workers = append(d.workers, startNode(t, fmt.Sprintf("worker-%d", i+1), "worker", "",
			"--nats", withUser(poolUser, "pool-pw"), "--pool", chanPool))
	}
	d.edge.waitReady(t)
	for _, w := range d.workers {
		w.waitReady(t)
	}
	return d
}

// publish puts the channel API (providers a and b) with the CLI and waits
// until every worker serves it and the edge routes it.
func (d *chanDeploy) publish(t *testing.T, a, b *provider) {
	t.Helper()
	doc, err := json.Marshal(map[string]any{
		"name":  chanAPI,
		"pool":  chanPool,
		"route": map[string]any{"method": "GET", "path": chanPath},
		"channels": []any{
			map[string]any{"name": "a", "backend": httpBackend(a.URL + "/sms")},
			map[string]any{"name": "b", "backend": httpBackend(b.URL + "/sms")},
		},
		"channel_policy": json.RawMessage(chanPolicy),
		"timeout":        "5s",
	})
	if err != nil {
		t.Fatal(err)
	}
	putAPI(t, d.admin, string(doc))
	for _, w := range d.workers {
		w.waitServing(t, chanAPI)
	}
	waitStatus(t, d.edge.edge+chanPath, http.StatusOK)
}

// noViolations fails the test if a process was refused something by the
// server: the pool's user must be enough for the channel machinery.
func (d *chanDeploy) noViolations(t *testing.T) {
	t.Helper()
	for _, p := range append([]*node{d.edge}, d.workers...) {
		for _, line := range p.output() {
			if strings.Contains(line, "Permissions Violation") || strings.Contains(line, "permissions violation") {
				t.Errorf("%s was refused: %s", p.name, line)
			}
		}
	}
}

// ---------------------------------------------------------------------------
// Load

// chanLoad sends about rate GETs a second to url from a few callers until
// stop, and counts what the callers saw.
type chanLoad struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	failures   []string // the first few
	stopOnce   sync.Once
	done       chan struct{}
	wg         sync.WaitGroup
	tr         *http.Transport
}

func startChanLoad(t *testing.T, url string, rate int) *chanLoad {
	t.Helper()
	l := &chanLoad{done: make(chan struct{}),
		tr: &http.Transport{MaxIdleConns: 64, MaxIdleConnsPerHost: 64, DisableCompression: true}}
	hc := &http.Client{Transport: l.tr, Timeout: 10 * time.Second}
	tokens := make(chan struct{})
	l.wg.Add(1)
	go func() { // the pace: a call is due every 1/rate s; one that finds no free caller is dropped
		defer l.wg.Done()
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		for {
			select {
			case <-l.done:
				return
			case <-tick.C:
			}
			select {
			case tokens <- struct{}{}:
			default:
			}
		}
	}()
	for range 16 {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				select {
				case <-l.done:
					return
				case <-tokens:
				}
				start := time.Now()
				resp, err := hc.Get(url)
				var body []byte
				if err == nil {
					body, err = io.ReadAll(resp.Body)
					resp.Body.Close()
				}
				switch {
				case err == nil && resp.StatusCode == http.StatusOK && (string(body) == "a ok" || string(body) == "b ok"):
					l.ok.Add(1)
				default:
					l.failed.Add(1)
					what := fmt.Sprint(err)
					if err == nil {
						what = fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(body)))
					}
					l.mu.Lock()
					if len(l.failures) < 10 {
						l.failures = append(l.failures, fmt.Sprintf("%s at %s after %v", what, start.Format("15:04:05.000"), time.Since(start).Round(time.Millisecond)))
					}
					l.mu.Unlock()
				}
			}
		}()
	}
	t.Cleanup(l.stop)
	return l
}

func (l *chanLoad) stop() {
	l.stopOnce.Do(func() {
		close(l.done)
		l.wg.Wait()
		l.tr.CloseIdleConnections()
	})
}

// noErrors fails the test if a caller saw anything but 200 so far.
func (l *chanLoad) noErrors(t *testing.T, when string) {
	t.Helper()
	if n := l.failed.Load(); n != 0 {
		l.mu.Lock()
		defer l.mu.Unlock()
		t.Fatalf("%s: %d of %d calls failed although channel b was healthy, e.g.:\n%s",
			when, n, n+l.ok.Load(), strings.Join(l.failures, "\n"))
	}
}

// ---------------------------------------------------------------------------
// The CLI

// channelRow is one line of `jetway channel list`.
type channelRow struct{ state, share, override string }

func channelList(t *testing.T, natsURL, api string) map[string]channelRow {
	t.Helper()
	res := jetway(t, "", "channel", "list", api, "--nats", natsURL)
	if res.code != 0 {
		t.Fatalf("jetway channel list %s: exit %d\n%s%s", api, res.code, res.stdout, res.stderr)
	}
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	if len(lines) < 1 || !strings.HasPrefix(lines[0], "CHANNEL") {
		t.Fatalf("jetway channel list %s printed no table:\n%s", api, res.stdout)
	}
	rows := map[string]channelRow{}
	for _, line := range lines[1:] {
		// CHANNEL STATE SHARE WEIGHT BACKUP OVERRIDE SINCE REASON; the
		// override is "-" or "<state> by <who>".
		f := strings.Fields(line)
		if len(f) < 7 {
			t.Fatalf("jetway channel list: line %q", line)
		}
		r := channelRow{state: f[1], share: f[2], override: f[5]}
		if f[5] != "-" && len(f) > 7 && f[6] == "by" {
			r.override = f[5] + " by " + f[7]
		}
		rows[f[0]] = r
	}
	return rows
}

// waitChannelState polls `jetway channel list` until the channel is in
// one of states, and returns what the list said.
func waitChannelState(t *testing.T, natsURL, api, channel string, within time.Duration, states ...string) channelRow {
	t.Helper()
	var row channelRow
	natstest.CheckFor(t, within, 50*time.Millisecond, func() error {
		row = channelList(t, natsURL, api)[channel]
		if !contains(states, row.state) {
			return fmt.Errorf("channel %s of %s is %+v, want one of %v", channel, api, row, states)
		}
		return nil
	})
	return row
}

// channelShow is what `jetway channel show` prints, as far as the tests
// read it.
type channelShow struct {
	API   string `json:"api"`
	Pool  string `json:"pool"`
	State *struct {
		Leader   string `json:"leader"`
		Channels []struct {
			Name  string  `json:"name"`
			State string  `json:"state"`
			Share float64 `json:"share"`
		} `json:"channels"`
	} `json:"state"`
	Revision uint64 `json:"revision"`
}

func showChannels(t *testing.T, natsURL, api string) channelShow {
	t.Helper()
	res := jetway(t, "", "channel", "show", api, "--nats", natsURL)
	if res.code != 0 {
		t.Fatalf("jetway channel show %s: exit %d\n%s%s", api, res.code, res.stdout, res.stderr)
	}
	var s channelShow
	if err := json.Unmarshal([]byte(res.stdout), &s); err != nil {
		t.Fatalf("jetway channel show %s: %v\n%s", api, err, res.stdout)
	}
	return s
}

// transition is one line of `jetway channel history`.
type transition struct {
	at                    time.Time
	channel, from, to, by string
	share                 float64
}

func (tr transition) String() string {
	return fmt.Sprintf("%s>%s@%.2f(%s)", tr.from, tr.to, tr.share, tr.by)
}

func channelHistory(t *testing.T, natsURL, api string) []transition {
	t.Helper()
	res := jetway(t, "", "channel", "history", api, "--nats", natsURL)
	if res.code != 0 {
		t.Fatalf("jetway channel history %s: exit %d\n%s%s", api, res.code, res.stdout, res.stderr)
	}
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	if len(lines) < 1 || !strings.HasPrefix(lines[0], "AT") {
		t.Fatalf("jetway channel history %s printed no table:\n%s", api, res.stdout)
	}
	var out []transition
	for _, line := range lines[1:] {
		// AT CHANNEL FROM TO SHARE BY CALLS FAILED REASON
		f := strings.Fields(line)
		if len(f) < 8 {
			t.Fatalf("jetway channel history: line %q", line)
		}
		at, err := time.Parse(time.RFC3339, f[0])
		if err != nil {
			t.Fatalf("jetway channel history: line %q: %v", line, err)
		}
		share, err := strconv.ParseFloat(f[4], 64)
		if err != nil {
			t.Fatalf("jetway channel history: line %q: %v", line, err)
		}
		out = append(out, transition{at: at, channel: f[1], from: f[2], to: f[3], share: share, by: f[5]})
	}
	return out
}

// of returns the transitions of one channel.
func of(trs []transition, channel string) []transition {
	var out []transition
	for _, tr := range trs {
		if tr.channel == channel {
			out = append(out, tr)
		}
	}
	return out
}

// electedNode is the node id a worker logged when it was elected the
// API's controller ("" if it never was).
func electedNode(w *node, api string) string {
	id := ""
	for _, s := range w.output() {
		var l logLine
		if json.Unmarshal([]byte(s), &l) == nil && l.str("msg") == "channel controller elected" && l.str("api") == api {
			id = l.str("node")
		}
	}
	return id
}

// waitLeader waits until the stored state names a leader and returns it.
func waitLeader(t *testing.T, natsURL, api string, within time.Duration, not string) string {
	t.Helper()
	var leader string
	natstest.CheckFor(t, within, 100*time.Millisecond, func() error {
		s := showChannels(t, natsURL, api)
		if s.State == nil || s.State.Leader == "" || s.State.Leader == not {
			return fmt.Errorf("state of %s: %+v", api, s.State)
		}
		leader = s.State.Leader
		return nil
	})
	return leader
}

// waitQuiet waits until the provider has had no call for quiet, and
// returns when it was last called.
func waitQuiet(t *testing.T, p *provider, quiet, within time.Duration) time.Time {
	t.Helper()
	natstest.CheckFor(t, within, 20*time.Millisecond, func() error {
		if since := time.Since(p.lastCall()); since < quiet {
			return fmt.Errorf("provider %s was called %v ago", p.name, since.Round(time.Millisecond))
		}
		return nil
	})
	return p.lastCall()
}

// waitHits waits until the provider's calls have grown by n.
func waitHits(t *testing.T, p *provider, n int64, within time.Duration) {
	t.Helper()
	from := p.hits.Load()
	natstest.CheckFor(t, within, 20*time.Millisecond, func() error {
		if got := p.hits.Load() - from; got < n {
			return fmt.Errorf("provider %s had %d calls, want %d", p.name, got, n)
		}
		return nil
	})
}

// ---------------------------------------------------------------------------
// Tests

// Issue 13's drill with real processes. Under ~200 GETs/s through the
// edge, provider a starts failing: the pool's controller cuts it, after
// which it gets nothing but its probes, and no caller sees an error
// meanwhile (a GET that fails on a fails over to b). Once a answers
// again, it comes back through a probe round and a doubling ramp, and the
// history lists every step as the controller's.
func TestChannelsEndToEnd(t *testing.T) {
	a, b := newProvider(t, "a"), newProvider(t, "b")
	d := startChanDeploy(t, 2)
	d.publish(t, a, b)
	// The owner is alerted: a channel_cut rule, whose events the test
	// hears as any subscriber would.
	alerts := followAlerts(t, d.admin)
	rule := `{"name":"sms-cut","kind":"channel_cut","api":"` + chanAPI + `"}`
	if res := jetway(t, rule, "alert", "put", "-", "--nats", d.admin); res.code != 0 {
		t.Fatalf("alert put: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	load := startChanLoad(t, d.edge.edge+chanPath, chanRate)

	// Both channels take calls, and the controller has judged them.
	waitHits(t, a, 50, 10*time.Second)
	waitHits(t, b, 50, 10*time.Second)
	waitChannelState(t, d.admin, chanAPI, "a", 10*time.Second, "available")
	waitLeader(t, d.admin, chanAPI, 10*time.Second, "")
	load.noErrors(t, "before the failure")

	// T1: a fails. It is cut within about two windows.
	a.failing.Store(true)
	failedAt := time.Now()
	// Two windows, and slack for the CLI's polls on a loaded machine.
	waitChannelState(t, d.admin, chanAPI, "a", 2*chanWindow+2*time.Second, "cut")
	t.Logf("a cut %v after it started failing", time.Since(failedAt).Round(time.Millisecond))
	if row := channelList(t, d.admin, chanAPI)["b"]; row.state != "available" {
		t.Fatalf("the healthy channel b is %+v", row)
	}
	alerts.wait(t, "firing", chanAPI+"/a", 10*time.Second)

	// Cut, a takes its probes and nothing else: over 3 s (a cut of 1–2 s,
	// then a probe round that fails, and so on) at most the probes of the
	// rounds that began, each worker sending up to 3 a round, where a
	// share would have been ~300 calls. The workers apply the stored
	// state as their watch delivers it: calls already sent may still arrive.
	time.Sleep(300 * time.Millisecond) // not a wait for a condition: the start of a measured span
	h0, from := a.hits.Load(), time.Now()
	time.Sleep(3 * chanWindow)
	got := a.hits.Load() - h0
	rounds := 0
	for _, tr := range of(channelHistory(t, d.admin, chanAPI), "a") {
		if tr.to == "probing" && !tr.at.Before(from.Add(-time.Second).Truncate(time.Second)) {
			rounds++
		}
	}
	allowed := int64(chanProbes * len(d.workers) * (rounds + 1))
	t.Logf("while cut, a had %d calls in 3s (%d probe rounds began; at most %d allowed); b had %d calls in all", got, rounds, allowed, b.hits.Load())
	if got > allowed {
		t.Fatalf("cut, a still had %d calls in 3s: more than the probes of %d rounds (%d)", got, rounds, allowed)
	}
	load.noErrors(t, "while a failed")

	// T2: a heals. Probed, ramped, available.
	a.failing.Store(false)
	healedAt := time.Now()
	waitChannelState(t, d.admin, chanAPI, "a", 20*time.Second, "available")
	t.Logf("a available again %v after it healed", time.Since(healedAt).Round(time.Millisecond))
	waitHits(t, a, 50, 5*time.Second) // it takes its share again
	alerts.wait(t, "resolved", chanAPI+"/a", 10*time.Second)
	load.stop()
	load.noErrors(t, "after a healed")
	t.Logf("%d calls through the edge, none failed", load.ok.Load())

	// The history: available → cut, the probe rounds, then probing →
	// ramping, the share doubling, → available; all by the controller.
	hist := of(channelHistory(t, d.admin, chanAPI), "a")
	var steps []string
	for _, tr := range hist {
		steps = append(steps, tr.String())
		if tr.by != "controller" {
			t.Errorf("transition %v of a is not the controller's", tr)
		}
	}
	t.Logf("history of a: %s", strings.Join(steps, " "))
	if len(hist) < 4 || hist[0].from != "available" || hist[0].to != "cut" {
		t.Fatalf("history of a does not begin with available → cut: %s", strings.Join(steps, " "))
	}
	// From the end: ramping → available at 1, the ramp's doublings, and
	// the passed probe round that began it (probing → ramping at 0.25),
	// entered from cut.
	i := len(hist) - 1
	if last := hist[i]; last.from != "ramping" || last.to != "available" || last.share != 1 {
		t.Fatalf("history of a does not end ramping → available: %s", strings.Join(steps, " "))
	}
	share := 1.0
	for i--; i >= 0 && hist[i].from == "ramping" && hist[i].to == "ramping"; i-- {
		if hist[i].share != share/2 {
			t.Fatalf("the ramp does not double the share: %s", strings.Join(steps, " "))
		}
		share /= 2
	}
	if i < 1 || hist[i].from != "probing" || hist[i].to != "ramping" || hist[i].share != 0.25 || share != 0.5 ||
		hist[i-1].from != "cut" || hist[i-1].to != "probing" {
		t.Fatalf("history of a: want … cut → probing → ramping 0.25 → 0.5 → available 1: %s", strings.Join(steps, " "))
	}
	for _, tr := range of(channelHistory(t, d.admin, chanAPI), "b") {
		t.Errorf("the healthy channel b changed: %v", tr)
	}
	d.noViolations(t)
}

// The controller survives its leader: the worker process whose node the
// stored state names as leader is killed (SIGKILL: its lease is not
// given up, it runs out). The other worker takes the lease and goes on: a
// provider that starts failing then is cut within the lease, the skew and
// two windows.
func TestChannelsLeaderDies(t *testing.T) {
	a, b := newProvider(t, "a"), newProvider(t, "b")
	d := startChanDeploy(t, 2)
	d.publish(t, a, b)
	load := startChanLoad(t, d.edge.edge+chanPath, chanRate)
	waitHits(t, a, 50, 10*time.Second)

	leader := waitLeader(t, d.admin, chanAPI, 10*time.Second, "")
	var victim, survivor *node
	for i, w := range d.workers {
		if electedNode(w, chanAPI) == leader {
			victim, survivor = w, d.workers[1-i]
		}
	}
	if victim == nil {
		t.Fatalf("the state's leader %s is neither worker's (elected: %q, %q)", leader,
			electedNode(d.workers[0], chanAPI), electedNode(d.workers[1], chanAPI))
	}
	victim.kill9(t)
	killedAt := time.Now()
	a.failing.Store(true)
	t.Logf("killed %s (leader %s); a fails from now", victim.name, leader)

	// lease 6 s + skew 1 s + a tick, then a failing window or two, on a
	// loaded machine.
	waitChannelState(t, d.admin, chanAPI, "a", 15*time.Second, "cut")
	t.Logf("a cut %v after the leader was killed", time.Since(killedAt).Round(time.Millisecond))
	s := showChannels(t, d.admin, chanAPI)
	if s.State == nil || s.State.Leader == "" {
		t.Fatalf("no leader named after the failover: %+v", s.State)
	}
	if s.State.Leader == leader {
		t.Fatalf("the killed worker %s still leads", leader)
	}
	if got := electedNode(survivor, chanAPI); got != s.State.Leader {
		t.Fatalf("the state's leader %s is not the surviving worker (elected as %q)", s.State.Leader, got)
	}
	// The new leader's cut holds: a gets its probes at most.
	time.Sleep(300 * time.Millisecond) // not a wait for a condition: the start of a measured span
	h0 := a.hits.Load()
	time.Sleep(2 * time.Second)
	if got := a.hits.Load() - h0; got > 2*chanProbes {
		t.Fatalf("cut by the new leader, a still had %d calls in 2s", got)
	}
	load.stop()
	// Calls in flight on the killed worker may have failed; what the
	// callers saw is logged, not judged.
	load.mu.Lock()
	t.Logf("%d calls, %d failed (the killed worker's in flight) %v", load.ok.Load()+load.failed.Load(), load.failed.Load(), load.failures)
	load.mu.Unlock()
	for _, tr := range of(channelHistory(t, d.admin, chanAPI), "a") {
		if tr.to == "cut" && tr.by != "controller" {
			t.Errorf("cut by %s, not the controller: %v", tr.by, tr)
		}
	}
	d.noViolations(t)
}

// An operator's cut: `jetway channel cut` stops the traffic to the
// channel within about 2 s, with no probes while it holds, and no
// caller sees an error; `jetway channel restore` hands the channel back to
// the controller, which probes it at once and brings it back.
func TestChannelsManualCutAndRestore(t *testing.T) {
	a, b := newProvider(t, "a"), newProvider(t, "b")
	d := startChanDeploy(t, 2)
	d.publish(t, a, b)
	load := startChanLoad(t, d.edge.edge+chanPath, chanRate)
	waitHits(t, a, 50, 10*time.Second)
	waitLeader(t, d.admin, chanAPI, 10*time.Second, "")

	cutAt := time.Now()
	res := jetway(t, "", "channel", "cut", chanAPI, "a", "--reason", "drill", "--nats", d.admin)
	cliTook := time.Since(cutAt)
	if res.code != 0 || !strings.Contains(res.stdout, "held cut") {
		t.Fatalf("jetway channel cut: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	row := waitChannelState(t, d.admin, chanAPI, "a", 5*time.Second, "cut")
	if !strings.HasPrefix(row.override, "cut by ") {
		t.Fatalf("the cut is not listed as an override: %+v", row)
	}
	last := waitQuiet(t, a, time.Second, 6*time.Second)
	stoppedIn := last.Sub(cutAt)
	t.Logf("a's last call %v after `jetway channel cut` began (the CLI itself took %v)", stoppedIn.Round(time.Millisecond), cliTook.Round(time.Millisecond))
	if stoppedIn > 5*time.Second { // about 2 s; race-built processes on a busy box take longer
		t.Fatalf("a was called %v after the cut began: want about 2 s", stoppedIn.Round(time.Millisecond))
	}
	// Held cut: not even probes (a is healthy; the controller would
	// bring it back if it could).
	h0 := a.hits.Load()
	time.Sleep(2 * chanWindow)
	if got := a.hits.Load() - h0; got != 0 {
		t.Fatalf("held cut, a had %d calls in 2 windows", got)
	}
	if row := channelList(t, d.admin, chanAPI)["a"]; row.state != "cut" {
		t.Fatalf("the controller overrode the operator's cut: %+v", row)
	}

	res = jetway(t, "", "channel", "restore", chanAPI, "a", "--nats", d.admin)
	if res.code != 0 || !strings.Contains(res.stdout, "controller's again") {
		t.Fatalf("jetway channel restore: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	// Probing at the controller's next step; a healthy channel then moves
	// on quickly, so any later state also shows the restore took.
	waitChannelState(t, d.admin, chanAPI, "a", 5*time.Second, "probing", "ramping", "available")
	waitChannelState(t, d.admin, chanAPI, "a", 15*time.Second, "available")
	waitHits(t, a, 50, 5*time.Second)
	load.stop()
	load.noErrors(t, "through the manual cut and the restore")

	var steps []string
	var manualCut, restored bool
	for _, tr := range of(channelHistory(t, d.admin, chanAPI), "a") {
		steps = append(steps, tr.String())
		switch {
		case tr.from == "available" && tr.to == "cut" && tr.by == "manual":
			manualCut = true
		case manualCut && tr.from == "cut" && tr.to == "probing":
			restored = true
		}
	}
	if !manualCut || !restored {
		t.Fatalf("history of a: want available → cut (manual), then cut → probing: %s", strings.Join(steps, " "))
	}
	t.Logf("history of a: %s", strings.Join(steps, " "))
	d.noViolations(t)
}

// alertLog collects the alert events published on jetway.alerts.>.
type alertLog struct {
	mu     sync.Mutex
	events []string // "<state> <target>"
}

func followAlerts(t *testing.T, natsURL string) *alertLog {
	t.Helper()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	l := &alertLog{}
	if _, err := nc.Subscribe("jetway.alerts.>", func(m *nats.Msg) {
		var ev struct{ State, Target string }
		if json.Unmarshal(m.Data, &ev) == nil {
			l.mu.Lock()
			l.events = append(l.events, ev.State+" "+ev.Target)
			l.mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return l
}

// wait waits for an alert event of state for target.
func (l *alertLog) wait(t *testing.T, state, target string, within time.Duration) {
	t.Helper()
	natstest.CheckFor(t, within, 50*time.Millisecond, func() error {
		l.mu.Lock()
		defer l.mu.Unlock()
		if !slices.Contains(l.events, state+" "+target) {
			return fmt.Errorf("no %s alert for %s among %v", state, target, l.events)
		}
		return nil
	})
}
