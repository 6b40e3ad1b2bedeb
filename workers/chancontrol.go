package workers

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/jetway-gw/jetway/backend"
	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/resilience"
)

// The cluster-wide half of channel sets. Every worker of a pool, each
// second, reports the outcomes its calls had on each channel
// (bus.ChannelReportPrefix) and adds up the reports of the whole pool. One
// worker per API holds the controller's lease (a key of
// registry.BucketChannels, taken and renewed by compare-and-set); it alone
// runs resilience.StepChannels on the pool's counts and writes the states
// it decides, each change a revision of the state key and an event on
// bus.ChannelEventPrefix. Every worker routes by the stored states, which
// it watches. When the leader dies, its lease runs out and another
// worker takes it, with the counts it has added up itself.

// Timings of the controller loop.
const (
	channelTick  = time.Second     // reports, lease renewals and steps
	channelLease = 6 * time.Second // a lease not renewed for this long may be taken
	// channelSkew is how much later than a lease's end another node
	// takes it: the nodes' clocks may differ by that much.
	channelSkew = time.Second
	// reportsArrive is how long after sending its reports a worker
	// steps its controllers: the pool's reports of the same second
	// arrive meanwhile.
	reportsArrive = 200 * time.Millisecond
	// channelKVTimeout bounds one API's KV calls in a step of the loop.
	channelKVTimeout = time.Second
)

// controller is a worker's part in one API's controller.
type controller struct {
	counts    atomic.Pointer[resilience.ChannelCounts]
	span      time.Duration // of counts; under channelMachinery.mu
	overrides atomic.Pointer[registry.ChannelOverrides]
	api       atomic.Pointer[registry.API] // the entry as last applied

	// Only the channel loop touches these.
	leaseRev uint64                      // the revision of our lease (0: not the leader)
	leaseAt  time.Time                   // when it was last renewed
	stateRev uint64                      // the revision of the state we wrote last
	state    *registry.ChannelStateEntry // what we wrote last (leader only)
}

// channelMachinery is the worker's channel loop, its watch and its
// report subscriptions, started with the first channel set.
type channelMachinery struct {
	once  sync.Once
	mu    sync.Mutex
	sets  map[string]*chanSet                    // by API name, under mu
	gone  []*chanSet                             // dropped sets whose lease the loop gives up, under mu
	known map[string]*registry.ChannelStateEntry // stored states seen before their API was applied
	kvs   map[string]*registry.ChannelOverrides  // overrides seen before their API was applied
	kv    atomic.Pointer[jetstream.KeyValue]
	// stopWatch ends the current watches (under mu).
	stopWatch context.CancelFunc
	// done is closed when the loop has ended, its leases given up.
	done atomic.Pointer[chan struct{}]
	subs []*nats.Subscription
}

// chanSetOf returns the API's channel set state, creating it (and the
// worker's channel machinery) on first use. Apply calls it under w.mu.
// An API tier without a controller (a draft, a sandbox tier) gets nil.
func (w *Worker) chanSetOf(a *registry.API) *chanSet {
	if a.ForSandbox() {
		return nil
	}
	m := &w.chans
	m.once.Do(func() { w.startChannels() })
	m.mu.Lock()
	defer m.mu.Unlock()
	cs := m.sets[a.Name]
	if cs == nil || cs.pool != a.Pool {
		cs = &chanSet{api: a.Name, pool: a.Pool, ctl: &controller{}}
		if st := m.known[registry.ChannelKey(registry.ChannelKeyState, a.Pool, a.Name)]; st != nil {
			cs.view.Store(st)
		}
		if o := m.kvs[registry.ChannelKey(registry.ChannelKeyManual, a.Pool, a.Name)]; o != nil {
			cs.ctl.overrides.Store(o)
		}
		m.sets[a.Name] = cs
	}
	cs.setChannels(a)
	cs.ctl.api.Store(a)
	switch {
	case a.Auth.Requires() && cs.recent.Load() == nil:
		cs.recent.Store(&recentCalls{})
	case !a.Auth.Requires():
		cs.recent.Store(nil)
	}
	// The counts reach back over the longer of the channels' window and a
	// release's step, which both judge from them.
	span := a.ChannelPolicy.Controller().Window
	if a.Release != nil {
		span = max(span, a.Release.Policy().Window)
	}
	if span += 5 * time.Second; span != cs.ctl.span {
		cs.ctl.counts.Store(resilience.NewChannelCounts(span))
		cs.ctl.span = span
	}
	return cs
}

// dropChannelSets forgets the channel sets of APIs that are gone or lost
// their channels; a lease held for one is given up. Apply calls it under
// w.mu with the APIs it serves.
func (w *Worker) dropChannelSets(want map[string]*registry.API) {
	m := &w.chans
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, cs := range m.sets {
		if a := want[name]; a == nil || !a.HasChannels() || a.Pool != cs.pool {
			delete(m.sets, name)
			m.gone = append(m.gone, cs)
		}
	}
}

// startChannels starts the channel loop, the watch of the pools' keys
// and the report subscriptions.
func (w *Worker) startChannels() {
	m := &w.chans
	m.sets = map[string]*chanSet{}
	m.known = map[string]*registry.ChannelStateEntry{}
	m.kvs = map[string]*registry.ChannelOverrides{}
	for _, tok := range bus.PoolTokens(w.o.Pools) {
		for subj, h := range map[string]nats.MsgHandler{
			bus.ChannelReportPrefix + tok + ".>":  w.onChannelReport,
			bus.ChannelOutcomePrefix + tok + ".>": w.onLateOutcomes,
		} {
			sub, err := w.o.Conn.Subscribe(subj, h)
			if err != nil {
				w.log.Error("subscribing to channel reports", "subject", subj, "err", err)
				continue
			}
			m.subs = append(m.subs, sub)
		}
	}
	done := make(chan struct{})
	m.done.Store(&done)
	go func() {
		defer close(done)
		w.channelLoop()
	}()
}

// waitChannels waits, within ctx and at most a couple of seconds, for the
// channel loop to end after the worker's stop: its leases are then given
// up, so another worker's controller takes over at once.
func (w *Worker) waitChannels(ctx context.Context) {
	d := w.chans.done.Load()
	if d == nil {
		return
	}
	t := time.NewTimer(2 * channelKVTimeout)
	defer t.Stop()
	select {
	case <-*d:
	case <-t.C:
	case <-ctx.Done():
	}
}

// channelLoop reports, watches and controls until the worker stops.
func (w *Worker) channelLoop() {
	t := time.NewTicker(channelTick)
	defer t.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-w.stopped
		cancel()
	}()
	for {
		select {
		case <-w.stopped:
			w.chans.mu.Lock()
			sets := append(w.chans.gone, slices.Collect(maps.Values(w.chans.sets))...)
			for _, s := range w.chans.subs {
				_ = s.Unsubscribe()
			}
			w.chans.mu.Unlock()
			for _, cs := range sets {
				w.releaseLease(cs)
			}
			return
		case <-t.C:
		}
		kv := w.channelsKV(ctx)
		w.chans.mu.Lock()
		sets, gone := slices.Collect(maps.Values(w.chans.sets)), w.chans.gone
		w.chans.gone = nil
		w.chans.mu.Unlock()
		for _, cs := range gone {
			w.releaseLease(cs)
		}
		for _, cs := range sets {
			w.reportChannels(cs)
		}
		// The leader steps once the pool's reports of the second just
		// ended have arrived, not a tick later.
		select {
		case <-w.stopped:
			continue
		case <-time.After(reportsArrive):
		}
		for _, cs := range sets {
			if kv != nil {
				// Each API's KV calls have a second: one that hangs
				// delays the others by no more; each steps at its own
				// now, so a lease is never renewed with a stale one.
				cctx, cancel := context.WithTimeout(ctx, channelKVTimeout)
				w.control(cctx, kv, cs, time.Now())
				cancel()
			}
		}
	}
}

// channelsKV opens the channels bucket (and its watch) once it exists.
func (w *Worker) channelsKV(ctx context.Context) jetstream.KeyValue {
	if kv := w.chans.kv.Load(); kv != nil {
		return *kv
	}
	octx, cancel := context.WithTimeout(ctx, channelTick)
	defer cancel()
	kv, err := w.js.KeyValue(octx, registry.BucketChannels)
	if err != nil {
		w.log.Debug("channels bucket not open yet", "err", err)
		return nil
	}
	// The pools' watches live and die together: when one ends (its
	// consumer lost for good), all stop and the next tick opens them
	// again, so no pool's states go stale and no watch is left behind.
	wctx, stop := context.WithCancel(ctx)
	w.chans.mu.Lock()
	w.chans.stopWatch = stop // the loop's context ends it too, at the worker's stop
	w.chans.mu.Unlock()
	var watches []jetstream.KeyWatcher
	for _, tok := range bus.PoolTokens(w.o.Pools) {
		watch, err := kv.Watch(wctx, "*."+tok+".>")
		if err != nil {
			w.log.Warn("watching channel states", "err", err)
			for _, wt := range watches {
				_ = wt.Stop()
			}
			stop()
			return nil
		}
		watches = append(watches, watch)
	}
	w.chans.kv.Store(&kv)
	for _, watch := range watches {
		go w.watchChannels(wctx, stop, watch)
	}
	return kv
}

// watchChannels applies the stored states and overrides as they change,
// until ctx ends; when its watch ends first, it stops the others (stop)
// and has the bucket opened again.
func (w *Worker) watchChannels(ctx context.Context, stop context.CancelFunc, watch jetstream.KeyWatcher) {
	defer func() { _ = watch.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-watch.Updates():
			if !ok {
				w.log.Warn("channel states watch ended; watching again")
				w.chans.kv.Store(nil)
				stop()
				return
			}
			if e != nil {
				w.onChannelEntry(e)
			}
		}
	}
}

func (w *Worker) onChannelEntry(e jetstream.KeyValueEntry) {
	kind, tok, api, ok := registry.ParseChannelKey(e.Key())
	if !ok || kind == registry.ChannelKeyLease {
		return
	}
	m := &w.chans
	m.mu.Lock()
	defer m.mu.Unlock()
	cs := m.sets[api]
	if cs != nil && bus.PoolToken(cs.pool) != tok {
		cs = nil // a key of another pool's API of that name
	}
	deleted := e.Operation() != jetstream.KeyValuePut
	switch kind {
	case registry.ChannelKeyState:
		var st *registry.ChannelStateEntry
		if !deleted {
			var err error
			if st, err = registry.ParseChannelState(e.Value()); err != nil {
				w.log.Warn("channel state ignored", "key", e.Key(), "err", err)
				return
			}
			st.Revision = e.Revision()
		}
		if cs != nil {
			cs.view.Store(st)
		} else if len(m.known) < maxKnownChannelKeys || m.known[e.Key()] != nil {
			m.known[e.Key()] = st
		}
	case registry.ChannelKeyManual:
		o := &registry.ChannelOverrides{}
		if !deleted && json.Unmarshal(e.Value(), o) != nil {
			w.log.Warn("channel overrides ignored: not JSON", "key", e.Key())
			return
		}
		if cs != nil {
			cs.ctl.overrides.Store(o)
		} else if len(m.kvs) < maxKnownChannelKeys || m.kvs[e.Key()] != nil {
			m.kvs[e.Key()] = o
		}
	}
}

// maxKnownChannelKeys bounds the states and overrides a worker keeps for
// APIs it has not applied (yet): a pool's worker may write keys of
// made-up APIs under its prefix, which must not grow every worker's
// memory. One beyond the bound is read again when its API is applied.
const maxKnownChannelKeys = 4096

// channelReport is what a worker reports of an API's channels each second.
type channelReport struct {
	Node     string                              `json:"node"`
	Channels map[string]resilience.ChannelWindow `json:"channels"`
}

// maxChannelReport bounds a report a worker reads; maxReportCalls the
// calls one report may count for a channel (a forged report can claim no
// more than a busy worker's second).
const (
	maxChannelReport = 16 << 10
	maxReportCalls   = 1_000_000
)

// reportChannels publishes what this worker's calls did on each channel
// of cs since the last report (nothing when there were none).
func (w *Worker) reportChannels(cs *chanSet) {
	rep := channelReport{Node: w.id, Channels: map[string]resilience.ChannelWindow{}}
	for name, c := range *cs.counters.Load() {
		if win := c.take(); win.Calls > 0 {
			rep.Channels[name] = win
		}
	}
	if len(rep.Channels) == 0 {
		return
	}
	b, _ := json.Marshal(rep)
	if err := w.o.Conn.Publish(bus.ChannelReportPrefix+bus.PoolToken(cs.pool)+"."+cs.api, b); err != nil {
		w.log.Warn("reporting channel outcomes", "api", cs.api, "err", err)
	}
}

// onChannelReport adds a pool member's report to the API's counts (this
// worker's own included). The pool is in the subject, which only its
// workers may publish; each count is bounded.
func (w *Worker) onChannelReport(m *nats.Msg) {
	cs := w.reportedSet(m.Subject, bus.ChannelReportPrefix)
	if cs == nil || len(m.Data) > maxChannelReport {
		return
	}
	var rep channelReport
	if json.Unmarshal(m.Data, &rep) != nil {
		return
	}
	now := time.Now()
	counts := cs.ctl.counts.Load()
	for name, win := range rep.Channels {
		if cs.counter(name) == nil || !plausible(win) {
			continue
		}
		counts.Add(name, now, win)
	}
}

// onLateOutcomes counts an edge's late outcome reports (an SMS delivery
// report) toward the channels' health: each outcome of a call this
// worker made one more call of its channel, failed or not, in this
// second.
func (w *Worker) onLateOutcomes(m *nats.Msg) {
	cs := w.reportedSet(m.Subject, bus.ChannelOutcomePrefix)
	if cs == nil || len(m.Data) > registry.MaxOutcomeBody+4<<10 { // the body the edge took, and the app it adds
		return
	}
	var rep registry.OutcomeReport
	if json.Unmarshal(m.Data, &rep) != nil || len(rep.Outcomes) > registry.MaxOutcomes {
		return
	}
	rc, routes := cs.recent.Load(), cs.routes.Load()
	if rc == nil || routes == nil {
		return
	}
	sums := map[string]resilience.ChannelWindow{}
	for _, o := range rep.Outcomes {
		// Only a call this worker made on that channel for the app that
		// reports, once: another worker's calls are its own to count,
		// and a made-up or repeated call id counts for nothing.
		i := slices.IndexFunc(*routes, func(r chanRoute) bool { return r.ch.Name == o.Channel })
		if i < 0 || cs.counter(o.Channel) == nil || !rc.claim(o.CallID, rep.App, i) {
			continue
		}
		win := sums[o.Channel]
		win.Calls++
		if !o.OK {
			win.Failures++
		}
		sums[o.Channel] = win
	}
	now, counts := time.Now(), cs.ctl.counts.Load()
	for name, win := range sums {
		counts.Add(name, now, win)
	}
}

// reportedSet is the channel set a report's subject (prefix, pool token,
// api) names, if this worker keeps it and the pool matches.
func (w *Worker) reportedSet(subject, prefix string) *chanSet {
	tok, api, ok := strings.Cut(strings.TrimPrefix(subject, prefix), ".")
	if !ok {
		return nil
	}
	w.chans.mu.Lock()
	cs := w.chans.sets[api]
	w.chans.mu.Unlock()
	if cs == nil || bus.PoolToken(cs.pool) != tok {
		return nil
	}
	return cs
}

// plausible reports whether a reported window could be a worker's second.
func plausible(w resilience.ChannelWindow) bool {
	inBuckets := 0
	for _, n := range w.Latency {
		if n < 0 {
			return false
		}
		inBuckets += n
	}
	return inBuckets <= w.Calls && w.Mismatches >= 0 && w.Mismatches <= w.Calls && w.Calls >= 0 && w.Calls <= maxReportCalls && w.Failures >= 0 && w.Failures <= w.Calls &&
		w.Probes >= 0 && w.Probes <= w.Calls && w.ProbeFailures >= 0 && w.ProbeFailures <= w.Probes &&
		w.ProbeFailures <= w.Failures && w.LatencySum >= 0 && w.LatencyMax >= 0
}

// control holds or seeks the API's lease and, as the leader, steps the
// controller and stores what changed.
func (w *Worker) control(ctx context.Context, kv jetstream.KeyValue, cs *chanSet, now time.Time) {
	ctl := cs.ctl
	a := ctl.api.Load()
	if a == nil || !w.lead(ctx, kv, cs, now) {
		return
	}
	if ctl.state == nil {
		// Just elected: start from what the last leader stored.
		e, err := kv.Get(ctx, registry.ChannelKey(registry.ChannelKeyState, cs.pool, cs.api))
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			ctl.state, ctl.stateRev = &registry.ChannelStateEntry{API: cs.api}, 0
		case err != nil:
			w.log.Warn("reading channel state", "api", cs.api, "err", err)
			return
		default:
			st, perr := registry.ParseChannelState(e.Value())
			if perr != nil {
				st = &registry.ChannelStateEntry{API: cs.api} // unreadable: start afresh, overwriting it
			}
			ctl.state, ctl.stateRev = st, e.Revision()
		}
	}
	counts := ctl.counts.Load()
	next, trans := resilience.StepChannels(a.ChannelPolicy.Controller(), a.ChannelSpecs(), ctl.state.Channels,
		ctl.overrides.Load().States(),
		func(ch string, since time.Time) resilience.ChannelWindow { return counts.Sum(ch, since, now) },
		now, rand.Uint64())
	rel, relEvents := w.stepRelease(a, ctl, counts, now)
	// Stored whenever anything moved, a change without a transition too
	// (an override set or cleared on a channel already in its state).
	defer w.cannedProbes(cs, a) // a round goes on while nothing else moves
	if len(trans) == 0 && len(relEvents) == 0 && ctl.stateRev != 0 && slices.Equal(next, ctl.state.Channels) && sameRelease(rel, ctl.state.Release) {
		return
	}
	entry := &registry.ChannelStateEntry{API: cs.api, Leader: w.id, At: now.UTC(), Channels: next, Transitions: trans,
		Release: rel, ReleaseEvents: relEvents}
	b, _ := json.Marshal(entry)
	key := registry.ChannelKey(registry.ChannelKeyState, cs.pool, cs.api)
	var rev uint64
	var err error
	if ctl.stateRev == 0 {
		rev, err = kv.Create(ctx, key, b)
	} else {
		rev, err = kv.Update(ctx, key, b, ctl.stateRev)
	}
	if err != nil {
		// Another node wrote it: it leads now. Seek the lease again.
		w.log.Warn("channel state not stored; giving up the lead", "api", cs.api, "err", err)
		ctl.leaseRev, ctl.state = 0, nil
		return
	}
	ctl.state, ctl.stateRev = entry, rev
	entry.Revision = rev
	cs.view.Store(entry)
	for _, ev := range relEvents {
		w.log.Warn("release changed", "api", cs.api, "canary", ev.Canary, "from", ev.From, "to", ev.To,
			"percent", ev.Percent, "by", ev.By, "reason", ev.Reason)
		b, _ := json.Marshal(struct {
			API     string                  `json:"api"`
			Kind    string                  `json:"kind"`
			Release resilience.ReleaseEvent `json:"release"`
		}{cs.api, "release", ev})
		if err := w.o.Conn.Publish(bus.ChannelEventPrefix+bus.PoolToken(cs.pool)+"."+cs.api, b); err != nil {
			w.log.Warn("publishing release change", "api", cs.api, "err", err)
		}
	}
	for _, tr := range trans {
		w.log.Warn("channel changed", "api", cs.api, "channel", tr.Channel, "from", tr.From, "to", tr.To,
			"share", tr.Share, "by", tr.By, "reason", tr.Reason)
		ev, _ := json.Marshal(struct {
			API string `json:"api"`
			resilience.ChannelTransition
		}{cs.api, tr})
		if err := w.o.Conn.Publish(bus.ChannelEventPrefix+bus.PoolToken(cs.pool)+"."+cs.api, ev); err != nil {
			w.log.Warn("publishing channel change", "api", cs.api, "err", err)
		}
	}
}

// maxCannedPerStep bounds the canned probes the leader sends per step.
const maxCannedPerStep = 20

// cannedProbes sends, as the leader, the canned probes still due in the
// current round of each channel being probed (probe canned): the saved
// requests in turn, each counted as a probe of that channel.
func (w *Worker) cannedProbes(cs *chanSet, a *registry.API) {
	p := a.ChannelPolicy
	routes := cs.routes.Load()
	if p.ProbeMode() != registry.ProbeCanned || len(p.ProbeRequests) == 0 || routes == nil || cs.ctl.state == nil {
		return
	}
	probes := p.Controller().Probes
	for _, st := range cs.ctl.state.Channels {
		if st.State != resilience.ChannelProbing {
			continue
		}
		c := cs.counter(st.Name)
		i := slices.IndexFunc(*routes, func(r chanRoute) bool { return r.ch.Name == st.Name })
		if c == nil || i < 0 {
			continue
		}
		for n := 0; n < maxCannedPerStep && c.takeProbe(st.Round, probes); n++ {
			pr := p.ProbeRequests[int(c.probesSent.Load()-1)%len(p.ProbeRequests)]
			ctx, cancel := context.WithTimeout(context.Background(), a.TimeoutOrDefault())
			sendCopy(ctx, (*routes)[i], cannedRequest(a, pr), a.TimeoutOrDefault(), func(resp *backend.Response, err error, took time.Duration) {
				c.record(took, failure(resp, err) != "", true)
			})
			cancel() // sendCopy keeps the deadline, not the context
		}
	}
}

// cannedRequest is a saved probe request as a backend sees a call.
func cannedRequest(a *registry.API, pr registry.ProbeRequest) *backend.Request {
	h := http.Header{}
	for k, v := range pr.Headers {
		h.Set(k, v)
	}
	h.Set("X-Jetway-Probe", "canned")
	return &backend.Request{API: a, Method: cmp.Or(pr.Method, http.MethodGet), Path: pr.Path, RawQuery: pr.Query,
		Header: h, Body: []byte(pr.Body), RequestID: "probe-" + nuid.Next()}
}

// stepRelease moves the API's gray release one step (nil, nil for an API
// without one).
func (w *Worker) stepRelease(a *registry.API, ctl *controller, counts *resilience.ChannelCounts, now time.Time) (*resilience.ReleaseState, []resilience.ReleaseEvent) {
	r := a.Release
	if r == nil {
		return nil, nil
	}
	gate, err := r.Gate()
	if err != nil { // checked at publish: hold the canary back rather than run ungated
		gate = func(_, _, _ resilience.ChannelWindow) (bool, string) {
			return true, "the gates could not be compiled: " + err.Error()
		}
	}
	var cur resilience.ReleaseState
	if ctl.state.Release != nil {
		cur = *ctl.state.Release
	}
	var cmd *resilience.ReleaseCommand
	if o := ctl.overrides.Load(); o != nil {
		cmd = o.Release
	}
	stable := func(since time.Time) resilience.ChannelWindow {
		var sum resilience.ChannelWindow
		for _, c := range a.Channels {
			if c.Name != r.Canary && c.Name != r.Shadow {
				sum.Add(counts.Sum(c.Name, since, now))
			}
		}
		return sum
	}
	canary := func(since time.Time) resilience.ChannelWindow { return counts.Sum(r.Canary, since, now) }
	var shadow func(since time.Time) resilience.ChannelWindow
	if r.Shadow != "" {
		shadow = func(since time.Time) resilience.ChannelWindow { return counts.Sum(r.Shadow, since, now) }
	}
	next, ev := resilience.StepRelease(r.Policy(), cur, r.Canary, cmd, canary, stable, shadow, gate, now)
	if ev == nil {
		return &next, nil
	}
	return &next, []resilience.ReleaseEvent{*ev}
}

// sameRelease reports whether two release states are the same.
func sameRelease(a, b *resilience.ReleaseState) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// lead renews the lease this worker holds, or takes the lease when nobody
// holds it or its holder let it run out; it reports whether this worker
// leads.
func (w *Worker) lead(ctx context.Context, kv jetstream.KeyValue, cs *chanSet, now time.Time) bool {
	ctl := cs.ctl
	key := registry.ChannelKey(registry.ChannelKeyLease, cs.pool, cs.api)
	mine, _ := json.Marshal(registry.ChannelLease{Node: w.id, Until: now.Add(channelLease).UTC()})
	if ctl.leaseRev != 0 {
		if now.Sub(ctl.leaseAt) < channelLease/3 {
			return true
		}
		rev, err := kv.Update(ctx, key, mine, ctl.leaseRev)
		if err == nil {
			ctl.leaseRev, ctl.leaseAt = rev, now
			return true
		}
		w.log.Warn("channel controller lease lost", "api", cs.api, "err", err)
		ctl.leaseRev, ctl.state = 0, nil
		return false
	}
	e, err := kv.Get(ctx, key)
	var rev uint64
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		rev, err = kv.Create(ctx, key, mine)
	case err != nil:
		return false
	default:
		var l registry.ChannelLease
		if e.Operation() == jetstream.KeyValuePut && json.Unmarshal(e.Value(), &l) == nil && l.Node != w.id && now.Before(l.Until.Add(channelSkew)) {
			return false // held by a live node (this one's own, after a failed renewal, is taken back at once)
		}
		rev, err = kv.Update(ctx, key, mine, e.Revision())
	}
	if err != nil {
		return false // another node took it first
	}
	w.log.Info("channel controller elected", "api", cs.api, "pool", cs.pool, "node", w.id)
	ctl.leaseRev, ctl.leaseAt, ctl.state = rev, now, nil
	return true
}

// releaseLease gives up the lease of cs if this worker holds it, so that
// another worker takes over at once rather than when it runs out. Only
// the channel loop calls it.
func (w *Worker) releaseLease(cs *chanSet) {
	ctl := cs.ctl
	kvp := w.chans.kv.Load()
	if ctl.leaseRev == 0 || kvp == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	key := registry.ChannelKey(registry.ChannelKeyLease, cs.pool, cs.api)
	if err := (*kvp).Delete(ctx, key, jetstream.LastRevision(ctl.leaseRev)); err != nil {
		w.log.Debug("releasing channel lease", "api", cs.api, "err", err)
	}
	ctl.leaseRev = 0
}
