package resilience

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
)

// Channel sets: an API served by several channels (providers, or a stable
// backend and its canary), and the controller that moves traffic between
// them from what the channels' calls did. This file is the controller's
// logic, a pure function of its inputs (the policy, the channels, their
// last states, the operator's overrides, the outcomes counted and the
// time); the worker that holds the pool's lease runs it and stores what it
// returns (workers/channels.go).
//
// A channel's life:
//
//	available ──success rate < threshold over the window,──> cut
//	    ^        another channel of each scenario available      │ base·2ⁿ (capped, jittered)
//	    │                                                         v
//	    └── share reaches 1 <── ramping (share doubles <── probing (Probes calls;
//	                            each window it passes)       their success ≥ threshold)
//
// A probe round or a ramp window that fails cuts the channel again with
// n+1. An operator's override (cut or available) beats the controller until
// it is cleared.

// ChannelState is where a channel is in its life.
type ChannelState string

// The states of a channel.
const (
	ChannelAvailable ChannelState = "available" // takes its full share
	ChannelCut       ChannelState = "cut"       // takes nothing until ProbeAt
	ChannelProbing   ChannelState = "probing"   // takes up to Probes calls of each round
	ChannelRamping   ChannelState = "ramping"   // takes Share of its full share
)

// Defaults that ChannelPolicy.WithDefaults puts in place of zero fields.
const (
	DefaultChannelThreshold = 0.9
	DefaultChannelWindow    = 10 * time.Second
	DefaultChannelMinVolume = 20
	DefaultChannelBase      = 5 * time.Minute
	DefaultChannelMaxCut    = time.Hour
	DefaultChannelJitter    = 0.1
	DefaultChannelProbes    = 5
	DefaultChannelRampStart = 1.0 / 16
)

// ChannelPolicy is how the controller judges an API's channels.
type ChannelPolicy struct {
	// Threshold is the success rate (0..1) below which a channel is cut,
	// and which its probes and ramp windows must reach.
	Threshold float64
	// Window is the evaluation window: the sliding span a channel's
	// success rate is measured over, and the length of one ramp step.
	Window time.Duration
	// MinVolume is the number of calls a window must hold before an
	// available channel is judged: a quiet hour cuts nothing.
	MinVolume int
	// Base is how long the first cut lasts before probing; the n-th
	// failed probe round or ramp step makes it Base·2ⁿ, capped at MaxCut,
	// with ±Jitter of it at random.
	Base, MaxCut time.Duration
	Jitter       float64
	// Probes is the number of probe calls of one round.
	Probes int
	// RampStart is the share (0..1] of its full share a channel gets when
	// its probes pass; it doubles at each window the channel passes.
	RampStart float64
}

// WithDefaults returns p with its zero fields set to the defaults, and
// MaxCut raised to Base when it is shorter.
func (p ChannelPolicy) WithDefaults() ChannelPolicy {
	if p.Threshold == 0 {
		p.Threshold = DefaultChannelThreshold
	}
	if p.Window == 0 {
		p.Window = DefaultChannelWindow
	}
	if p.MinVolume == 0 {
		p.MinVolume = DefaultChannelMinVolume
	}
	if p.Base == 0 {
		p.Base = DefaultChannelBase
	}
	if p.MaxCut == 0 {
		p.MaxCut = DefaultChannelMaxCut
	}
	p.MaxCut = max(p.MaxCut, p.Base)
	if p.Jitter == 0 {
		p.Jitter = DefaultChannelJitter
	}
	if p.Probes == 0 {
		p.Probes = DefaultChannelProbes
	}
	if p.RampStart == 0 {
		p.RampStart = DefaultChannelRampStart
	}
	return p
}

// cutLength is how long the cut after n failed probe rounds or ramp steps
// lasts: min(Base·2ⁿ, MaxCut), moved by up to ±Jitter of it as r (a
// uniformly random number) picks, and never below 0.
func (p ChannelPolicy) cutLength(n int, r uint64) time.Duration {
	length := p.MaxCut
	if n = max(n, 0); n < 63 && p.Base <= p.MaxCut>>n {
		length = p.Base << n
	}
	u := float64(r>>11) / (1 << 53) // uniform in [0, 1)
	d := float64(length) * (1 + p.Jitter*(2*u-1))
	if d >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(max(d, 0))
}

// ChannelSpec is a channel as the API's entry defines it.
type ChannelSpec struct {
	Name string
	// Serves are the scenarios the channel serves (keys the registry
	// derives from the channel's dimensions). A channel is cut only if
	// every scenario it serves keeps another available channel.
	Serves []string
}

// ChannelStatus is a channel's state as the controller stores it (one
// JSON document per API holds them all, in the entry's order).
type ChannelStatus struct {
	Name  string       `json:"name"`
	State ChannelState `json:"state"`
	// Share is the part of its full share the channel takes: 1 when
	// available, the ramp step when ramping, 0 when cut or probing.
	Share float64 `json:"share"`
	// Fails is n: the probe rounds and ramp steps that failed since the
	// channel was last available.
	Fails int `json:"fails,omitempty"`
	// Since is when the current state (or ramp step) began.
	Since time.Time `json:"since"`
	// ProbeAt is when a cut channel starts probing (zero under a manual
	// cut: it waits for the operator).
	ProbeAt time.Time `json:"probe_at,omitzero"`
	// Round numbers the probe rounds: a worker sends up to Probes probe
	// calls per round.
	Round uint64 `json:"round,omitempty"`
	// Manual is the operator's override in force ("" for none).
	Manual ChannelState `json:"manual,omitempty"`
	// Reason says why the channel is in its state, with the figures.
	Reason string `json:"reason,omitempty"`
}

// ChannelWindow is what a channel's calls did over a span of time.
type ChannelWindow struct {
	Calls         int `json:"calls"`    // calls that reached the channel, probes included
	Failures      int `json:"failures"` // of those, the failed ones (the API's classify)
	Probes        int `json:"probes"`   // probe calls (state probing)
	ProbeFailures int `json:"probe_failures"`
	// LatencySum and LatencyMax are of the Calls, for the figures shown.
	LatencySum time.Duration `json:"latency_sum"`
	LatencyMax time.Duration `json:"latency_max"`
	// Latency counts the Calls by latency bucket (LatencyBounds), for
	// the p99 a release's gate reads.
	Latency LatencyHistogram `json:"latency,omitzero"`
	// Mismatches counts the shadow calls whose status differed from the
	// answer the caller got (a release's shadow target).
	Mismatches int `json:"mismatches,omitempty"`
}

// LatencyBounds are the upper bounds of the latency buckets of a
// LatencyHistogram; the last bucket takes everything above.
var LatencyBounds = [...]time.Duration{
	time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond,
	20 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond,
	500 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second,
	30 * time.Second, time.Minute,
}

// LatencyHistogram counts calls by latency bucket: [i] those at most
// LatencyBounds[i] (and above the bound before), the last those above
// every bound.
type LatencyHistogram [len(LatencyBounds) + 1]int

// LatencyBucket is the bucket of a latency.
func LatencyBucket(d time.Duration) int {
	for i, b := range LatencyBounds {
		if d <= b {
			return i
		}
	}
	return len(LatencyBounds)
}

// Quantile is the upper bound of the bucket holding the q-th quantile
// (0 with no call; the largest bound doubled for the last bucket).
func (h *LatencyHistogram) Quantile(q float64) time.Duration {
	total := 0
	for _, n := range h {
		total += n
	}
	if total == 0 {
		return 0
	}
	rank := int(math.Ceil(q * float64(total)))
	seen := 0
	for i, n := range h {
		seen += n
		if seen >= rank {
			if i == len(LatencyBounds) {
				return 2 * LatencyBounds[len(LatencyBounds)-1]
			}
			return LatencyBounds[i]
		}
	}
	return 2 * LatencyBounds[len(LatencyBounds)-1]
}

// P99 is the window's 99th percentile latency, to its bucket's bound.
func (w ChannelWindow) P99() time.Duration { return w.Latency.Quantile(0.99) }

// ErrorRate is the share of failed calls (0 with no call).
func (w ChannelWindow) ErrorRate() float64 { return 1 - w.SuccessRate() }

// Add adds o's counts to w (LatencyMax becomes the larger of the two).
func (w *ChannelWindow) Add(o ChannelWindow) {
	w.Calls += o.Calls
	w.Failures += o.Failures
	w.Probes += o.Probes
	w.ProbeFailures += o.ProbeFailures
	w.LatencySum += o.LatencySum
	w.LatencyMax = max(w.LatencyMax, o.LatencyMax)
	for i, n := range o.Latency {
		w.Latency[i] += n
	}
	w.Mismatches += o.Mismatches
}

// SuccessRate is the share of successful calls (1 with no call).
func (w ChannelWindow) SuccessRate() float64 {
	if w.Calls == 0 {
		return 1
	}
	return 1 - float64(w.Failures)/float64(w.Calls)
}

// ChannelTransition is one change of a channel's state, for the history
// and the alerts.
type ChannelTransition struct {
	Channel string       `json:"channel"`
	From    ChannelState `json:"from"`
	To      ChannelState `json:"to"`
	Share   float64      `json:"share"`
	// By is "controller" or "manual".
	By     string        `json:"by"`
	Reason string        `json:"reason"`
	At     time.Time     `json:"at"`
	Window ChannelWindow `json:"window"` // the figures that decided
}

// StepChannels moves an API's channels one step at now. specs are the
// channels of the entry, in its order; cur their last stored states (a
// channel of specs missing from cur starts available; one of cur missing
// from specs is dropped); overrides the operator's (channel → cut or
// available); observed sums a channel's outcomes from since to now; rnd a
// random number for the jitter. It returns the new states (in specs'
// order) and the transitions made, in order.
//
// The operator's overrides are applied first; then the controller judges
// the other channels in specs' order, each seeing the decisions made
// before it, so that it never takes out the last available channel of a
// scenario, even when several fail at once.
func StepChannels(p ChannelPolicy, specs []ChannelSpec, cur []ChannelStatus, overrides map[string]ChannelState,
	observed func(channel string, since time.Time) ChannelWindow, now time.Time, rnd uint64) ([]ChannelStatus, []ChannelTransition) {
	s := stepper{p: p.WithDefaults(), specs: specs, out: startStates(specs, cur, now),
		observed: observed, now: now, rnd: rnd}
	// The operator's overrides first, so that the controller's decisions
	// (which channel may be cut) see them; then the controller, channel by
	// channel, each seeing the decisions made before it.
	settled := make([]bool, len(specs))
	for i, sp := range specs {
		settled[i] = s.manual(i, overrides[sp.Name])
	}
	for i := range specs {
		if !settled[i] {
			s.automate(i)
		}
	}
	return s.out, s.trans
}

// The values of ChannelTransition.By.
const (
	byController = "controller"
	byManual     = "manual"
)

// servesAll is what a channel without Serves serves: the one scenario
// shared by every such channel.
var servesAll = []string{""}

// startStates returns the states the step starts from, in specs' order:
// each channel's last stored state, or available from now for a channel
// with none (new, or stored in a state this code does not know).
func startStates(specs []ChannelSpec, cur []ChannelStatus, now time.Time) []ChannelStatus {
	last := make(map[string]ChannelStatus, len(cur))
	for _, st := range cur {
		if _, dup := last[st.Name]; !dup {
			last[st.Name] = st
		}
	}
	out := make([]ChannelStatus, len(specs))
	for i, sp := range specs {
		st, ok := last[sp.Name]
		if !ok || !knownState(st.State) {
			st = ChannelStatus{Name: sp.Name, State: ChannelAvailable, Share: 1, Since: now}
		}
		out[i] = st
	}
	return out
}

// knownState reports whether s is one of the four states of a channel.
func knownState(s ChannelState) bool {
	switch s {
	case ChannelAvailable, ChannelCut, ChannelProbing, ChannelRamping:
		return true
	}
	return false
}

// stepper is one step of StepChannels: its inputs, the states as decided
// so far and the transitions made.
type stepper struct {
	p        ChannelPolicy // defaults applied
	specs    []ChannelSpec
	out      []ChannelStatus // in specs' order
	observed func(channel string, since time.Time) ChannelWindow
	now      time.Time
	rnd      uint64
	trans    []ChannelTransition
}

// manual applies the operator's override o (anything but cut or available
// counts as none) to channel i, or clears the one it no longer has. It
// reports whether the channel is settled for this step: an override is in
// force, or one was just cleared.
func (s *stepper) manual(i int, o ChannelState) bool {
	st := &s.out[i]
	if o != ChannelCut && o != ChannelAvailable {
		if st.Manual == "" {
			return false
		}
		s.clearManual(i)
		return true
	}
	if st.Manual != o {
		s.override(i, o)
	}
	return true
}

// override puts channel i under the operator's cut or available.
func (s *stepper) override(i int, o ChannelState) {
	st := &s.out[i]
	st.Manual = o
	st.ProbeAt = time.Time{} // a manual cut waits for the operator
	if o == ChannelCut {
		s.enter(i, ChannelCut, 0, byManual, "cut by the operator", ChannelWindow{})
		return
	}
	st.Fails = 0
	s.enter(i, ChannelAvailable, 1, byManual, "made available by the operator", ChannelWindow{})
}

// clearManual hands channel i back to the controller: a cut channel probes
// at once (a new life: n starts from 0), an available one starts a new
// window, so that what it did under the override does not count.
func (s *stepper) clearManual(i int) {
	st := &s.out[i]
	st.Manual = ""
	if st.State == ChannelCut {
		st.Fails = 0
		s.startRound(i, byManual, "the operator's cut was cleared: probing")
		return
	}
	st.Since = s.now
	st.Reason = "the operator's override was cleared"
}

// automate moves channel i, which no override holds, as its state and its
// calls say.
func (s *stepper) automate(i int) {
	switch s.out[i].State {
	case ChannelAvailable:
		s.judgeAvailable(i)
	case ChannelCut:
		s.probeIfDue(i)
	case ChannelProbing:
		s.judgeProbes(i)
	case ChannelRamping:
		s.judgeRamp(i)
	}
}

// judgeAvailable cuts channel i when its success rate over the last window
// (since it became available, if that is more recent) is below the
// threshold, the window holds MinVolume calls, and every scenario it serves
// keeps another available channel.
func (s *stepper) judgeAvailable(i int) {
	st := &s.out[i]
	since := s.now.Add(-s.p.Window)
	if st.Since.After(since) {
		since = st.Since
	}
	w := s.observed(st.Name, since)
	low, why := s.callsText(w, s.now.Sub(since))
	if w.Calls >= s.p.MinVolume && low && s.cuttable(i) {
		s.cut(i, st.Fails, w, why)
	}
}

// probeIfDue starts a probe round of cut channel i once its cut is over.
func (s *stepper) probeIfDue(i int) {
	st := &s.out[i]
	if st.ProbeAt.IsZero() || s.now.Before(st.ProbeAt) {
		return
	}
	cutFor := st.ProbeAt.Sub(st.Since)
	s.startRound(i, byController, fmt.Sprintf("probing after a cut of %v", cutFor.Round(time.Millisecond)))
}

// startRound starts a new probe round of cut channel i. The transition's
// figures are what still reached the channel during its cut; reading them
// also gives observed the time before the round's probes are sent, which
// ChannelCounts needs after a quiet cut (see its doc).
func (s *stepper) startRound(i int, by, reason string) {
	st := &s.out[i]
	w := s.observed(st.Name, st.Since)
	st.Round++
	s.enter(i, ChannelProbing, 0, by, reason, w)
}

// judgeProbes judges probing channel i's round once it holds Probes probes
// (on as many as it holds), or as soon as so many failed that the round
// can no longer pass: it ramps from RampStart or is cut again with n+1.
// A round without probes waits.
func (s *stepper) judgeProbes(i int) {
	st := &s.out[i]
	w := s.observed(st.Name, st.Since)
	n := s.p.Probes
	if w.Probes >= n {
		low, rate := s.judge(w.Probes-w.ProbeFailures, w.Probes)
		why := fmt.Sprintf("%d of %d probes failed (success rate %s)", w.ProbeFailures, w.Probes, rate)
		if low {
			s.cut(i, st.Fails+1, w, why)
		} else {
			s.ramp(i, s.p.RampStart, w, why)
		}
		return
	}
	if low, rate := s.judge(n-w.ProbeFailures, n); low {
		s.cut(i, st.Fails+1, w, fmt.Sprintf("%d of %d probes failed already (success rate at best %s)",
			w.ProbeFailures, n, rate))
	}
}

// judgeRamp judges ramping channel i's step: cut again with n+1 as soon as
// MinVolume calls show a success rate below the threshold; once the step
// has lasted a window and holds at least Probes calls, cut with n+1 if the
// rate is below the threshold, or double the share. A step with fewer
// calls waits.
func (s *stepper) judgeRamp(i int) {
	st := &s.out[i]
	w := s.observed(st.Name, st.Since)
	span := s.now.Sub(st.Since)
	low, why := s.callsText(w, span)
	why = fmt.Sprintf("%s at share %g", why, st.Share)
	full := span >= s.p.Window && w.Calls >= s.p.Probes
	switch {
	case low && (full || w.Calls >= s.p.MinVolume):
		s.cut(i, st.Fails+1, w, why)
	case full:
		s.ramp(i, st.Share*2, w, why)
	}
}

// cut cuts channel i by the controller after fails failed probe rounds or
// ramp steps, until the cut's length (see ChannelPolicy.cutLength) is over.
func (s *stepper) cut(i, fails int, w ChannelWindow, why string) {
	st := &s.out[i]
	length := s.p.cutLength(fails, s.random(i))
	st.Fails = fails
	s.enter(i, ChannelCut, 0, byController, fmt.Sprintf("%s; probes in %v", why, length.Round(time.Millisecond)), w)
	st.ProbeAt = s.now.Add(length)
}

// ramp gives channel i share of its full share, or makes it available (n
// back to 0) when share reaches 1.
func (s *stepper) ramp(i int, share float64, w ChannelWindow, why string) {
	if share >= 1 {
		s.out[i].Fails = 0
		s.enter(i, ChannelAvailable, 1, byController, why+"; available", w)
		return
	}
	s.enter(i, ChannelRamping, share, byController, fmt.Sprintf("%s; share %g", why, share), w)
}

// enter puts channel i in state to with share from now, and records the
// transition when the state changes and at every ramp step.
func (s *stepper) enter(i int, to ChannelState, share float64, by, reason string, w ChannelWindow) {
	st := &s.out[i]
	from := st.State
	st.State, st.Share, st.Since, st.Reason = to, share, s.now, reason
	if to != ChannelCut {
		st.ProbeAt = time.Time{}
	}
	if from == to && to != ChannelRamping {
		return
	}
	s.trans = append(s.trans, ChannelTransition{Channel: st.Name, From: from, To: to, Share: share,
		By: by, Reason: reason, At: s.now, Window: w})
}

// cuttable reports whether every scenario channel i serves has another
// channel available as decided so far.
func (s *stepper) cuttable(i int) bool {
	for _, sc := range serves(s.specs[i]) {
		if !s.availableElsewhere(i, sc) {
			return false
		}
	}
	return true
}

// availableElsewhere reports whether a channel other than i that serves
// scenario is available.
func (s *stepper) availableElsewhere(i int, scenario string) bool {
	for j, st := range s.out {
		if j != i && st.State == ChannelAvailable && slices.Contains(serves(s.specs[j]), scenario) {
			return true
		}
	}
	return false
}

// serves returns the scenarios sp serves.
func serves(sp ChannelSpec) []string {
	if len(sp.Serves) == 0 {
		return servesAll
	}
	return sp.Serves
}

// callsText judges w's success rate and says so with the figures: "success
// rate 0.42 < 0.90 over 10s (58 of 100 calls failed)".
func (s *stepper) callsText(w ChannelWindow, span time.Duration) (low bool, text string) {
	low, rate := s.judge(w.Calls-w.Failures, w.Calls)
	return low, fmt.Sprintf("success rate %s over %v (%d of %d calls failed)",
		rate, span.Round(time.Millisecond), w.Failures, w.Calls)
}

// judge reports whether the success rate ok/total (1 with none) is below
// the threshold, compared exactly (in millionths), and says it: "0.42 <
// 0.90" or "0.95 ≥ 0.90".
func (s *stepper) judge(ok, total int) (low bool, text string) {
	low = int64(ok)*ppmOne < millionths(s.p.Threshold)*int64(total)
	rate := 1.0
	if total > 0 {
		rate = float64(ok) / float64(total)
	}
	cmp := "≥"
	if low {
		cmp = "<"
	}
	return low, fmt.Sprintf("%.2f %s %.2f", rate, cmp, s.p.Threshold)
}

// random is the step's random number for channel i: independent of the
// other channels' (a splitmix64 output of the step's number).
func (s *stepper) random(i int) uint64 {
	return splitmix64(s.rnd + uint64(i+1)*0x9e3779b97f4a7c15)
}

// splitmix64 is the finalizer of the SplitMix64 generator: a bijection
// that scatters nearby inputs over the whole range.
func splitmix64(x uint64) uint64 {
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// ChannelCounts holds the outcomes of an API's channels in one-second
// buckets over a span (the controller's window plus a margin): the
// reports of every worker of the pool are added into it, and
// StepChannels's observed reads it through Sum. Safe for concurrent use;
// its memory is a fixed ring of buckets per channel.
//
// A report far ahead of the newest second seen comes from a wild clock and
// is dropped. The newest second seen is that of the reports counted and
// the now of Sum: the controller's steps keep it current (StepChannels
// reads every channel it judges, and the one it starts probing), so that
// the first reports after a quiet spell are not taken for a wild clock's.
type ChannelCounts struct {
	keep int64 // seconds kept before the newest one seen

	mu     sync.Mutex
	seen   bool  // newest is set
	newest int64 // the newest second counted or read (Unix time)
	rings  map[string][]channelBucket
}

// channelAhead is how many seconds ahead of the newest one seen an Add
// still counts (a clock a little fast, or a new second); further ahead is
// a wild clock, dropped.
const channelAhead = 5

// channelBucket is one second's counts of a channel; a ring slot holds the
// bucket of the latest second written to it.
type channelBucket struct {
	sec int64 // Unix time
	w   ChannelWindow
}

// NewChannelCounts keeps span of one-second buckets.
func NewChannelCounts(span time.Duration) *ChannelCounts {
	keep := int64(span / time.Second)
	if span%time.Second != 0 {
		keep++
	}
	return &ChannelCounts{keep: max(keep, 1), rings: make(map[string][]channelBucket)}
}

// Add counts w for channel in the bucket of at (dropped if at is older
// than the span before the newest bucket seen, or too far ahead).
func (c *ChannelCounts) Add(channel string, at time.Time, w ChannelWindow) {
	sec := at.Unix()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.seen {
		c.see(sec)
	}
	if sec > c.newest+channelAhead || sec < c.newest-c.keep {
		return
	}
	c.see(sec)
	ring := c.rings[channel]
	if ring == nil {
		ring = make([]channelBucket, c.keep+1)
		c.rings[channel] = ring
	}
	b := &ring[c.slot(sec)]
	if b.sec != sec {
		*b = channelBucket{sec: sec}
	}
	b.w.Add(w)
}

// Sum adds up channel's buckets from since (its bucket included) to now.
// now counts as a second seen (see ChannelCounts).
func (c *ChannelCounts) Sum(channel string, since, now time.Time) ChannelWindow {
	var w ChannelWindow
	c.mu.Lock()
	defer c.mu.Unlock()
	c.see(now.Unix())
	ring := c.rings[channel]
	if ring == nil {
		return w
	}
	// The seconds kept are those of the span up to the newest one.
	for sec := max(since.Unix(), c.newest-c.keep); sec <= min(now.Unix(), c.newest); sec++ {
		if b := ring[c.slot(sec)]; b.sec == sec { // not an older second's
			w.Add(b.w)
		}
	}
	return w
}

// see moves the newest second seen on to sec, if sec is newer.
func (c *ChannelCounts) see(sec int64) {
	if !c.seen || sec > c.newest {
		c.seen, c.newest = true, sec
	}
}

// slot is the ring slot of second sec.
func (c *ChannelCounts) slot(sec int64) int64 {
	n := c.keep + 1
	return (sec%n + n) % n
}
