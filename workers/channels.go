package workers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jetway-gw/jetway/backend"
	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/expr"
	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/resilience"
)

// Channel sets: an API served by several backends (registry.Channel). A
// call picks one channel of its scenario by weight and by the channels'
// states, which the pool's elected controller decides and stores
// (chancontrol.go); a call that failed on one channel is tried on the next
// when that is safe. Every outcome is counted per channel and reported to
// the pool each second, which is what the controller judges.

// channelInstances are the backend instances of an API's channels, held
// as one instance (held) while their specs are unchanged.
type channelInstances struct {
	byName map[string]backend.Instance
	failed map[string]backend.Backend // channels whose build failed: their calls get BAD_GATEWAY
}

func (ci *channelInstances) Call(context.Context, *backend.Request) (*backend.Response, error) {
	return nil, bus.Errorf(bus.CodeInternal, "a channel set is called through its channels")
}

func (ci *channelInstances) Close() error {
	var errs []error
	for _, inst := range ci.byName {
		errs = append(errs, inst.Close())
	}
	return errors.Join(errs...)
}

// channelsFingerprint is what the channels' instances are built from:
// their names and backend specs (weights and matches are read per call).
func channelsFingerprint(a *registry.API) string {
	parts := make([]any, 0, 2*len(a.Channels))
	for _, c := range a.Channels {
		parts = append(parts, c.Name, c.Backend)
	}
	return resilience.Fingerprint(parts)
}

// holdChannels builds the instance of each channel.
func (w *Worker) holdChannels(a *registry.API) *held {
	ci := &channelInstances{byName: map[string]backend.Instance{}, failed: map[string]backend.Backend{}}
	for _, c := range a.Channels {
		ad := w.adapters[c.Backend.Type]
		if ad == nil {
			ci.failed[c.Name] = failed(fmt.Sprintf("backend type %q of channel %s of api %s is not supported by this worker", c.Backend.Type, c.Name, a.Key()))
			continue
		}
		inst, err := ad.Build(&c.Backend, backend.BuildOptions{Logger: w.log, Tracer: w.clientTracer, Pool: a.Pool})
		if err != nil {
			w.log.Error("building backend", "api", a.Key(), "channel", c.Name, "type", c.Backend.Type, "err", err)
			ci.failed[c.Name] = failed(fmt.Sprintf("backend of channel %s of api %s could not be set up", c.Name, a.Key()))
			continue
		}
		ci.byName[c.Name] = inst
	}
	h := &held{log: w.log, inst: ci}
	h.call = ci.Call
	return h
}

// chanCounter counts one channel's outcomes on this worker between two
// reports, and the probes it sent in the current probe round.
type chanCounter struct {
	calls, failures, probes, probeFailures atomic.Int64
	latencySum, latencyMax                 atomic.Int64 // ns
	latency                                [len(resilience.LatencyHistogram{})]atomic.Int64
	mismatches                             atomic.Int64
	round                                  atomic.Uint64
	probesSent                             atomic.Int64
	// totals are never taken: the worker's metrics (chanmetrics.go).
	totals chanTotals
}

// chanTotals count a channel's calls on this worker since it started.
type chanTotals struct {
	ok, failed, probes, mismatches atomic.Int64
	latencySum                     atomic.Int64 // ns
	latency                        [len(resilience.LatencyHistogram{})]atomic.Int64
}

func (c *chanCounter) record(d time.Duration, failed, probe bool) {
	bucket := resilience.LatencyBucket(d)
	c.calls.Add(1)
	c.latency[bucket].Add(1)
	c.totals.latency[bucket].Add(1)
	c.totals.latencySum.Add(int64(d))
	if failed {
		c.failures.Add(1)
		c.totals.failed.Add(1)
	} else {
		c.totals.ok.Add(1)
	}
	if probe {
		c.probes.Add(1)
		c.totals.probes.Add(1)
		if failed {
			c.probeFailures.Add(1)
		}
	}
	c.latencySum.Add(int64(d))
	for {
		m := c.latencyMax.Load()
		if int64(d) <= m || c.latencyMax.CompareAndSwap(m, int64(d)) {
			break
		}
	}
}

// take returns the counts since the last take and starts again.
func (c *chanCounter) take() resilience.ChannelWindow {
	w := resilience.ChannelWindow{
		Calls: int(c.calls.Swap(0)), Failures: int(c.failures.Swap(0)),
		Probes: int(c.probes.Swap(0)), ProbeFailures: int(c.probeFailures.Swap(0)),
		LatencySum: time.Duration(c.latencySum.Swap(0)), LatencyMax: time.Duration(c.latencyMax.Swap(0)),
		Mismatches: int(c.mismatches.Swap(0)),
	}
	for i := range c.latency {
		w.Latency[i] = int(c.latency[i].Swap(0))
	}
	return w
}

// takeProbe reserves one probe call of round for this worker: a worker
// sends at most probes per round (the controller needs that many in all).
func (c *chanCounter) takeProbe(round uint64, probes int) bool {
	if r := c.round.Load(); r != round {
		if c.round.CompareAndSwap(r, round) {
			c.probesSent.Store(0)
		}
	}
	if c.probesSent.Add(1) > int64(probes) {
		c.probesSent.Add(-1)
		return false
	}
	return true
}

// chanSet is what a worker keeps of an API's channel set across registry
// changes: the counters, the stored states the controller decided, and
// the controller (chancontrol.go).
type chanSet struct {
	api, pool string
	counters  atomic.Pointer[map[string]*chanCounter]
	view      atomic.Pointer[registry.ChannelStateEntry]
	ctl       *controller
	// routes are the channels as the API's current stack calls them,
	// for the controller's canned probes (chancontrol.go).
	routes atomic.Pointer[[]chanRoute]
	// recent are the calls a late outcome may be reported for (nil for
	// an API that takes no reports: one that does not authenticate).
	recent atomic.Pointer[recentCalls]
}

// counter returns the channel's counter (nil for a channel the set no
// longer has).
func (cs *chanSet) counter(name string) *chanCounter {
	return (*cs.counters.Load())[name]
}

// setChannels gives the set a counter for each channel of a, keeping
// those it had.
func (cs *chanSet) setChannels(a *registry.API) {
	old := cs.counters.Load()
	m := make(map[string]*chanCounter, len(a.Channels))
	for _, c := range a.Channels {
		if old != nil && (*old)[c.Name] != nil {
			m[c.Name] = (*old)[c.Name]
		} else {
			m[c.Name] = &chanCounter{}
		}
	}
	cs.counters.Store(&m)
}

// chanRoute is one channel as a call of the current snapshot sees it.
type chanRoute struct {
	ch   *registry.Channel
	idx  int             // its place in the entry's list
	call backend.Backend // breaker → classify → the channel's instance
}

// channelSet is the backend of an API with channels: it picks a channel
// for each call and fails over to the next. cs is nil for an API tier
// without a controller (a draft): every channel counts as available.
func (w *Worker) channelSet(a *registry.API, h *held, cs *chanSet, g *governance) backend.Backend {
	ci, _ := h.inst.(*channelInstances)
	if ci == nil {
		return h.call // the channels' instances could not be held
	}
	routes := make([]chanRoute, len(a.Channels))
	classify := w.classify(a)
	for i := range a.Channels {
		c := &a.Channels[i]
		call := ci.failed[c.Name]
		if inst := ci.byName[c.Name]; inst != nil {
			call = inst.Call
		}
		routes[i] = chanRoute{ch: c, idx: i, call: backend.Chain(call, w.channelBreaker(a, c, g), classify)}
	}
	if cs != nil {
		cs.routes.Store(&routes)
	}
	policy := a.ChannelPolicy
	ctlPolicy := policy.Controller()
	failover, probeMode := policy.FailoverMode(), policy.ProbeMode()
	var dims []registry.Dimension
	if policy != nil {
		dims = policy.Dimensions
	}
	budget := g.channelBudget(a)
	apiTimeout := a.TimeoutOrDefault()
	rel := w.releaseRoute(a)
	return func(ctx context.Context, req *backend.Request) (*backend.Response, error) {
		var view *registry.ChannelStateEntry
		if cs != nil {
			view = cs.view.Load()
		}
		vals := dimensionValues(dims, req)
		var hidden []bool
		canary := -1
		if rel != nil {
			hidden, canary = rel.hidden, rel.canary
		}
		co := newCallOrder()
		probe := pickChannels(&co, routes, dims, vals, view, rand.Uint64(), hidden, canary)
		if rel != nil {
			if c := rel.canary; rel.toCanary(req, view) && usable(view, routes[c].ch.Name) && routes[c].ch.Serves(dims, vals) {
				co.pushFront(c)
			}
		}
		order := co.list()
		switch {
		case len(order) == 0 && probe >= 0:
			// Nothing else serves the scenario: the channel being probed
			// takes the call, as a probe, rather than no one (else a
			// scenario whose every channel is cut would never come back).
			co.push(probe)
			order = co.list()
		case len(order) == 0:
			return nil, bus.Errorf(bus.CodeCircuitOpen, fmt.Sprintf("every channel of api %s that serves this call is cut", a.Name))
		case probe >= 0 && cs != nil && probeMode == registry.ProbeLive:
			// A live probe: one call of the round goes to the channel
			// being probed first; it falls back to the others if it fails.
			st := view.Channel(routes[probe].ch.Name)
			if c := cs.counter(routes[probe].ch.Name); c != nil && st != nil && c.takeProbe(st.Round, ctlPolicy.Probes) {
				co.pushFront(probe)
				order = co.list()
			} else {
				probe = -1
			}
		case probe >= 0 && cs != nil && probeMode == registry.ProbeShadow:
			st := view.Channel(routes[probe].ch.Name)
			if c := cs.counter(routes[probe].ch.Name); c != nil && st != nil && c.takeProbe(st.Round, ctlPolicy.Probes) {
				w.shadow(ctx, routes[probe], req, c, apiTimeout)
			}
			probe = -1
		default:
			// Canned probes are the controller's (chancontrol.go), and a
			// tier without one sends none: this call is no probe.
			probe = -1
		}
		budget.Deposit(time.Now())
		for i, idx := range order {
			r := routes[idx]
			isProbe := i == 0 && probe >= 0
			resp, err := w.callChannel(ctx, r, req, cs, isProbe, apiTimeout)
			cond := failure(resp, err)
			if cond == "" || (resp != nil && resp.Stream != nil) {
				if rel != nil && rel.shadow >= 0 && cs != nil && resp != nil && resp.Stream == nil && usable(view, routes[rel.shadow].ch.Name) {
					w.mirror(ctx, rel, routes[rel.shadow], req, cs, resp.Status, apiTimeout)
				}
				return resp, err
			}
			if i == len(order)-1 || ctx.Err() != nil || !mayFailOver(failover, cond, req, isProbe) {
				return resp, err
			}
			// A refusal before sending costs no retry; a failover that
			// may have sent twice (or a probe's fallback) spends the
			// budget, a probe's only when the call is not safe anyway.
			if cond != registry.FallbackOnCircuitOpen && !isProbe && !budget.TryRetry(time.Now()) {
				return resp, err
			}
			resp.Free() // the next channel's answer replaces it
		}
		panic("unreachable")
	}
}

// callOrder is the order a call tries channels in, kept in a fixed
// array with room in front for the two channels a call may put first (a
// release's canary, a probe): it stays on the call's stack.
type callOrder struct {
	buf    [registry.MaxChannels + 2]int
	lo, hi int
}

func newCallOrder() callOrder { return callOrder{lo: 2, hi: 2} }

func (o *callOrder) push(i int)      { o.buf[o.hi] = i; o.hi++ }
func (o *callOrder) pushFront(i int) { o.lo--; o.buf[o.lo] = i }
func (o *callOrder) list() []int     { return o.buf[o.lo:o.hi] }

// mayFailOver reports whether a call that failed on a channel (cond, as
// failure says) may go on to the next. Another channel is another
// provider: it knows nothing of the first one's Idempotency-Key, and a
// PUT there is another write. So, with failover safe, only safe methods
// (GET, HEAD, OPTIONS) move on after a channel may have acted; any call
// moves on after a refusal that proves nothing was sent (the channel's
// breaker open). failover always moves every call on; never, none. A
// live probe of a call not otherwise safe falls back unless failover
// is never: that is the point of live probing (an SMS-like API).
func mayFailOver(failover, cond string, req *backend.Request, probe bool) bool {
	switch {
	case failover == registry.FailoverNever:
		return false
	case failover == registry.FailoverAlways, cond == registry.FallbackOnCircuitOpen, probe:
		return true
	}
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return true
	}
	return false
}

// callChannel calls one channel within its timeout (and the call's
// deadline) and counts the outcome.
func (w *Worker) callChannel(ctx context.Context, r chanRoute, req *backend.Request, cs *chanSet, probe bool, apiTimeout time.Duration) (*backend.Response, error) {
	timeout := cmp.Or(time.Duration(r.ch.Timeout), apiTimeout)
	start := time.Now()
	actx, cancel := ctx, context.CancelFunc(nil)
	if dl, ok := ctx.Deadline(); !ok || dl.Sub(start) > timeout {
		actx, cancel = context.WithTimeout(ctx, timeout) // the channel's own timeout is the shorter
	}
	resp, err := r.call(actx, req)
	if cancel != nil {
		if resp != nil && resp.Stream != nil {
			resp.AfterStream(func(error) { cancel() })
		} else {
			cancel()
		}
	}
	if cs != nil && countsAgainst(ctx, resp, err, start, timeout) {
		if c := cs.counter(r.ch.Name); c != nil {
			c.record(time.Since(start), failure(resp, err) != "", probe)
		}
		if rc := cs.recent.Load(); rc != nil && resp != nil {
			rc.add(req.RequestID, req.App, r.idx) // a late outcome may come for it
		}
	}
	if resp != nil {
		// Which channel answered, for the caller's logs and the late
		// outcome reports (a copy: an adapter may share its response).
		cp := *resp
		cp.Channel = r.ch.Name
		return &cp, err
	}
	return resp, err
}

// channelHeader is the reply header that names the channel that answered.
const channelHeader = "X-Jetway-Channel"

// countsAgainst reports whether a channel call's outcome says something
// of the channel, to be counted: not when the caller left before an
// answer, when the channel's own breaker refused it (nothing reached the
// channel), or when it ran out of a deadline the caller cut short (a
// caller's X-Request-Timeout: 1ms must not get a healthy channel cut for
// everyone). A deadline counts as the caller's when it left the call
// clearly less than the channel's timeout want.
func countsAgainst(ctx context.Context, resp *backend.Response, err error, start time.Time, want time.Duration) bool {
	if errors.Is(ctx.Err(), context.Canceled) && resp == nil {
		return false
	}
	switch failure(resp, err) {
	case registry.FallbackOnCircuitOpen:
		return false
	case registry.RetryOnTimeout:
		return !callerShortened(ctx, start, want)
	}
	return true
}

// callerShortened reports whether ctx's deadline left a call started at
// start clearly less than want (by more than a tenth, or 100 ms): the
// caller's deadline, not the channel's timeout, ended it.
func callerShortened(ctx context.Context, start time.Time, want time.Duration) bool {
	dl, ok := ctx.Deadline()
	return ok && dl.Sub(start) < want-min(want/10, 100*time.Millisecond)
}

// shadow sends a copy of req to a channel being probed, off the call's
// path, and counts its outcome as a probe; the answer is discarded. At
// most the round's probes are sent (takeProbe), so these are bounded.
func (w *Worker) shadow(ctx context.Context, r chanRoute, req *backend.Request, c *chanCounter, apiTimeout time.Duration) {
	sendCopy(ctx, r, req, apiTimeout, func(resp *backend.Response, err error, took time.Duration) {
		c.record(took, failure(resp, err) != "", true)
	})
}

// sendCopy calls a channel with a copy of req on a goroutine of its own,
// within req's deadline (or apiTimeout), and hands the outcome to done;
// the answer is freed after.
func sendCopy(ctx context.Context, r chanRoute, req *backend.Request, apiTimeout time.Duration, done func(*backend.Response, error, time.Duration)) {
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(apiTimeout)
	}
	cp := *req
	cp.Header = req.Header.Clone()
	cp.Body = slices.Clone(req.Body) // the caller's buffer may be reused once it has its answer
	cp.Stream = 0
	go func() {
		sctx, cancel := context.WithDeadline(context.Background(), dl)
		defer cancel()
		start := time.Now()
		resp, err := r.call(sctx, &cp)
		done(resp, err, time.Since(start))
		resp.Free()
	}()
}

// dimensionValues reads a call's value of each dimension.
func dimensionValues(dims []registry.Dimension, req *backend.Request) []string {
	if len(dims) == 0 {
		return nil
	}
	out := make([]string, len(dims))
	for i, d := range dims {
		kind, name, _ := strings.Cut(d.From, ":")
		switch kind {
		case "header":
			out[i] = req.Header.Get(name)
		case "query":
			out[i] = queryValue(req.RawQuery, name)
		case "param":
			out[i] = req.Params().Get(name)
		case "app":
			out[i] = req.App
		}
	}
	return out
}

func queryValue(raw, name string) string {
	for raw != "" {
		var kv string
		kv, raw, _ = strings.Cut(raw, "&")
		k, v, _ := strings.Cut(kv, "=")
		if k == name {
			return v
		}
	}
	return ""
}

// pickChannels pushes to order the channels that may serve a call of scenario
// vals: first one picked by weight among the available and ramping
// channels not hidden (a release's canary and shadow, which it routes
// itself) (each weighing its weight times its share; backups only when
// no other is available), then the other available ones in the entry's
// order, for failover. probe is the index of a channel of the scenario
// being probed (-1 for none). A channel the view does not know (new, or
// no controller yet) counts as available.
func pickChannels(order *callOrder, routes []chanRoute, dims []registry.Dimension, vals []string, view *registry.ChannelStateEntry, rnd uint64, hidden []bool, canary int) int {
	probe := -1
	type cand struct {
		idx    int
		weight float64
	}
	// At most MaxChannels of each: on the stack, no allocation per call.
	var primBuf, backupBuf [registry.MaxChannels]cand
	prim, backups := primBuf[:0], backupBuf[:0]
	var total, backupTotal float64
	for i, r := range routes {
		if !r.ch.Serves(dims, vals) {
			continue
		}
		share := 1.0
		if st := view.Channel(r.ch.Name); st != nil {
			switch st.State {
			case resilience.ChannelCut:
				continue
			case resilience.ChannelProbing:
				// A hidden canary is probed too (one an operator cut and
				// then restored), or it would stay probing for ever.
				if probe < 0 && (hidden == nil || !hidden[i] || i == canary) {
					probe = i
				}
				continue
			case resilience.ChannelRamping:
				share = st.Share
			}
		}
		if hidden != nil && hidden[i] {
			continue
		}
		c := cand{i, float64(r.ch.WeightOrDefault()) * share}
		if r.ch.Backup {
			backups = append(backups, c)
			backupTotal += c.weight
		} else {
			prim = append(prim, c)
			total += c.weight
		}
	}
	pool, sum := prim, total
	if sum <= 0 {
		pool, sum = backups, backupTotal
	}
	first := -1
	if sum > 0 {
		x := float64(rnd>>11) / (1 << 53) * sum
		for _, c := range pool {
			if x < c.weight {
				first = c.idx
				break
			}
			x -= c.weight
		}
		if first < 0 {
			first = pool[len(pool)-1].idx
		}
		order.push(first)
	}
	for _, cs := range [2][]cand{prim, backups} {
		for _, c := range cs {
			if c.idx != first {
				order.push(c.idx)
			}
		}
	}
	return probe
}

// channelBreaker is the API's breaker policy applied to one channel, on
// this worker only: the controller is what the pool shares. nil without
// a breaker policy.
func (w *Worker) channelBreaker(a *registry.API, c *registry.Channel, g *governance) backend.Middleware {
	if a.Breaker == nil {
		return nil
	}
	br := g.channelBreaker(c.Name, a.Breaker.Config())
	if br == nil {
		return nil
	}
	name := a.Name + " channel " + c.Name
	timeout := cmp.Or(time.Duration(c.Timeout), a.TimeoutOrDefault())
	return func(next backend.Backend) backend.Backend {
		return func(ctx context.Context, req *backend.Request) (*backend.Response, error) {
			tk := br.Allow(time.Now())
			if !tk.OK {
				return nil, bus.Errorf(bus.CodeCircuitOpen, fmt.Sprintf("circuit open for %s (%s); retry in %v", name, tk.Refusal, tk.RetryAfter.Round(time.Millisecond)))
			}
			start := time.Now()
			resp, err := next(ctx, req)
			if !countsAgainst(ctx, resp, err, start, timeout) {
				br.Cancel(tk)
				return resp, err
			}
			end := time.Now()
			if tr, changed := br.Record(tk, end, end.Sub(start), failure(resp, err) != ""); changed {
				w.log.Warn("channel breaker changed", "api", a.Name, "channel", c.Name, "from", tr.From, "to", tr.To, "reason", tr.Reason)
			}
			return resp, err
		}
	}
}

// releaseRoute is how an API's gray release routes: which calls get the
// canary, and which are mirrored to the shadow.
type releaseRoute struct {
	canary, shadow int    // indexes into the routes; shadow -1 for none
	hidden         []bool // the canary and shadow, left out of the ordinary pick
	sticky, header string // app, client_ip, header (named header) or "" (random)
	match          *expr.Cond
	always, never  []string
	shadowShare    float64 // of the calls mirrored, 0..1
	// shadows counts the mirrored calls in flight: at most maxShadows.
	shadows atomic.Int64
}

// maxShadows bounds the mirrored calls of a release in flight on a
// worker: a slow shadow loses copies, never holds the worker's memory.
const maxShadows = 64

// releaseRoute builds the routing of a's release (nil without one).
func (w *Worker) releaseRoute(a *registry.API) *releaseRoute {
	r := a.Release
	if r == nil {
		return nil
	}
	rr := &releaseRoute{canary: -1, shadow: -1, hidden: make([]bool, len(a.Channels)), always: r.Always, never: r.Never,
		shadowShare: r.ShadowShare()}
	for i, c := range a.Channels {
		switch c.Name {
		case r.Canary:
			rr.canary, rr.hidden[i] = i, true
		case r.Shadow:
			rr.shadow, rr.hidden[i] = i, true
		}
	}
	if rr.canary < 0 { // checked at publish
		return nil
	}
	rr.sticky = r.Sticky
	if kind, name, ok := strings.Cut(r.Sticky, ":"); ok && kind == "header" {
		rr.sticky, rr.header = "header", name
	}
	if r.Match != "" {
		var err error
		if rr.match, err = expr.Compile(r.Match); err != nil { // checked at publish
			w.log.Warn("release match not compiled; no call gets the canary", "api", a.Name, "err", err)
			rr.match = never
		}
	}
	return rr
}

// never is a condition that never holds.
var never, _ = expr.Compile("false")

// toCanary reports whether a call goes to the canary: never once the
// release is rolled back, never for an app in never, always for one in
// always, else only while the release runs (or is promoted), for calls
// its match holds for, a share of them drawn by the sticky key.
func (rr *releaseRoute) toCanary(req *backend.Request, view *registry.ChannelStateEntry) bool {
	rel := (*resilience.ReleaseState)(nil)
	if view != nil {
		rel = view.Release
	}
	if rel != nil && rel.Stage == resilience.ReleaseRolledBack {
		return false // rolled back is 0 for everyone: the canary breached, or an operator said so
	}
	if req.App != "" {
		if slices.Contains(rr.never, req.App) {
			return false
		}
		if slices.Contains(rr.always, req.App) {
			return true
		}
	}
	if rel == nil || rel.Percent <= 0 {
		return false
	}
	if rr.match != nil {
		ok, err := rr.match.Eval(&expr.Input{Method: req.Method, Path: req.Path, Header: req.Header, RawQuery: req.RawQuery,
			App: req.App, Sandbox: req.API.ForSandbox(), ClientIP: req.ClientIP})
		if err != nil || !ok {
			return false
		}
	}
	var key string
	switch rr.sticky {
	case "app":
		key = req.App
	case "client_ip":
		key = req.ClientIP
	case "header":
		key = req.Header.Get(rr.header)
	}
	var draw uint64
	if key == "" {
		draw = rand.Uint64()
	} else {
		h := fnv.New64a()
		_, _ = h.Write([]byte(key))
		draw = h.Sum64()
	}
	return float64(draw%1_000_000) < rel.Percent*10_000
}

// usable reports whether a channel may take calls: not cut or probing.
func usable(view *registry.ChannelStateEntry, name string) bool {
	st := view.Channel(name)
	return st == nil || st.State == resilience.ChannelAvailable || st.State == resilience.ChannelRamping
}

// mirror sends a copy of req to the release's shadow, off the call's
// path, within the call's deadline; its outcome counts for the shadow's
// figures, with a mismatch when its status differs from the answer the
// caller got. Copies beyond maxShadows in flight are dropped.
func (w *Worker) mirror(ctx context.Context, rr *releaseRoute, r chanRoute, req *backend.Request, cs *chanSet, status int, apiTimeout time.Duration) {
	if rr.shadowShare < 1 && float64(rand.Uint64()%1_000_000) >= rr.shadowShare*1_000_000 {
		return
	}
	if rr.shadows.Add(1) > maxShadows {
		rr.shadows.Add(-1)
		return
	}
	c := cs.counter(r.ch.Name)
	sendCopy(ctx, r, req, apiTimeout, func(resp *backend.Response, err error, took time.Duration) {
		rr.shadows.Add(-1)
		if c != nil {
			c.record(took, failure(resp, err) != "", false)
			if resp == nil || resp.Status != status {
				c.mismatches.Add(1)
				c.totals.mismatches.Add(1)
			}
		}
	})
}
