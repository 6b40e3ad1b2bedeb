package resilience

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// Defaults that NewBreaker puts in place of a BreakerConfig's zero fields.
const (
	// DefaultBreakerConsecutiveFailures is the trip strategy used when a
	// config turns no strategy on.
	DefaultBreakerConsecutiveFailures = 3
	// DefaultBreakerWindow is the length of the sliding window of the ratio
	// strategies.
	DefaultBreakerWindow = 10 * time.Second
	// DefaultBreakerMinCalls is the number of calls the window must hold
	// before a ratio strategy may trip.
	DefaultBreakerMinCalls = 20
	// DefaultBreakerOpenFor is the length of the first open period.
	DefaultBreakerOpenFor = 5 * time.Second
	// DefaultBreakerMaxOpenFor caps the doubling of the open period (raised
	// to OpenFor when OpenFor is longer).
	DefaultBreakerMaxOpenFor = time.Minute
	// DefaultBreakerHalfOpenProbes is the number of probe calls admitted in
	// half-open.
	DefaultBreakerHalfOpenProbes = 3
	// DefaultBreakerSlowStart is how long traffic ramps up after a close.
	DefaultBreakerSlowStart = 10 * time.Second
	// DefaultBreakerSlowStartFrom is the share of calls admitted at the
	// start of the ramp.
	DefaultBreakerSlowStartFrom = 0.10
)

// minTallyWindow is the shortest sliding window accepted (10 ms buckets).
const minTallyWindow = 100 * time.Millisecond

// BreakerConfig configures one circuit breaker. Each field maps 1:1 to a
// field of the breaker object in a registry API entry; the JSON name is given
// in brackets, and validation errors use it. A zero field takes its default.
//
// Trip strategies (any combination; each is off when zero, and when all are
// off ConsecutiveFailures defaults to 3):
//   - ConsecutiveFailures failed calls in a row;
//   - ConsecutiveSlow calls in a row slower than SlowCall;
//   - a failure ratio of at least FailureRatio over the sliding Window, once
//     the window holds MinCalls calls;
//   - a slow-call ratio of at least SlowRatio over the same window, with the
//     same minimum.
//
// The window is time-based: Window is cut into 10 buckets, and the ratios are
// computed over the current bucket and the 9 before it, so a call counts for
// between 0.9×Window and Window after it is recorded. A slow call is one with
// latency > SlowCall, whether it failed or not (as in resilience4j).
type BreakerConfig struct {
	// ConsecutiveFailures trips after this many failures in a row
	// [consecutive_failures]. 0 = off (3 if no strategy is on).
	ConsecutiveFailures int
	// ConsecutiveSlow trips after this many slow calls in a row
	// [consecutive_slow]. 0 = off. Needs SlowCall.
	ConsecutiveSlow int
	// SlowCall is the latency above which a call is slow [slow_call].
	// Required by ConsecutiveSlow and SlowRatio; when either is on, a slow
	// half-open probe counts as a failed one.
	SlowCall time.Duration
	// FailureRatio in (0, 1] trips when failures/calls over Window reach it
	// [failure_ratio]. 0 = off.
	FailureRatio float64
	// SlowRatio in (0, 1] trips when slow calls/calls over Window reach it
	// [slow_ratio]. 0 = off. Needs SlowCall.
	SlowRatio float64
	// Window is the length of the sliding window of the ratio strategies
	// [window]; at least 100ms. Default 10s.
	Window time.Duration
	// MinCalls is the number of calls the window must hold before a ratio
	// strategy may trip [min_calls]. Default 20.
	MinCalls int
	// OpenFor is the first open period [open_for]. Default 5s. Each failed
	// half-open round doubles it, up to MaxOpenFor; a close resets it.
	OpenFor time.Duration
	// MaxOpenFor caps the doubled open period [max_open_for]. Default 1m,
	// or OpenFor if that is longer.
	MaxOpenFor time.Duration
	// HalfOpenProbes is the number of calls admitted in half-open
	// [half_open_probes]; all must succeed to close. Default 3.
	HalfOpenProbes int
	// SlowStart is how long the admitted share of calls ramps linearly from
	// SlowStartFrom to 100% after a close [slow_start]. Default 10s; a
	// negative value turns slow start off.
	SlowStart time.Duration
	// SlowStartFrom in (0, 1] is the share admitted when the ramp starts
	// [slow_start_from]. Default 0.10.
	SlowStartFrom float64
}

// Validate reports every problem of c at once (joined with errors.Join),
// each naming its field by its JSON name. It checks c as written, after
// defaults for the fields left zero.
func (c BreakerConfig) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{field}, args...)...))
	}
	nonNegInt := func(field string, v int) {
		if v < 0 {
			bad(field, "%d is negative", v)
		}
	}
	nonNegInt("consecutive_failures", c.ConsecutiveFailures)
	nonNegInt("consecutive_slow", c.ConsecutiveSlow)
	nonNegInt("min_calls", c.MinCalls)
	nonNegInt("half_open_probes", c.HalfOpenProbes)
	share := func(field string, v float64) {
		if math.IsNaN(v) || v < 0 || v > 1 {
			bad(field, "%v is not in (0, 1]", v)
		}
	}
	share("failure_ratio", c.FailureRatio)
	share("slow_ratio", c.SlowRatio)
	share("slow_start_from", c.SlowStartFrom)
	if c.SlowCall < 0 {
		bad("slow_call", "%v is negative", c.SlowCall)
	} else if c.SlowCall == 0 && (c.ConsecutiveSlow > 0 || c.SlowRatio > 0) {
		bad("slow_call", "required by consecutive_slow and slow_ratio")
	}
	if c.Window < 0 {
		bad("window", "%v is negative", c.Window)
	} else if c.Window > 0 && c.Window < minTallyWindow {
		bad("window", "%v is shorter than %v", c.Window, minTallyWindow)
	}
	if c.OpenFor < 0 {
		bad("open_for", "%v is negative", c.OpenFor)
	}
	if c.MaxOpenFor < 0 {
		bad("max_open_for", "%v is negative", c.MaxOpenFor)
	} else if d := c.withDefaults(); c.MaxOpenFor > 0 && c.OpenFor >= 0 && d.MaxOpenFor < d.OpenFor {
		bad("max_open_for", "%v is shorter than open_for %v", d.MaxOpenFor, d.OpenFor)
	}
	return errors.Join(errs...)
}

func (c BreakerConfig) withDefaults() BreakerConfig {
	if c.ConsecutiveFailures == 0 && c.ConsecutiveSlow == 0 && c.FailureRatio == 0 && c.SlowRatio == 0 {
		c.ConsecutiveFailures = DefaultBreakerConsecutiveFailures
	}
	if c.Window == 0 {
		c.Window = DefaultBreakerWindow
	}
	if c.MinCalls == 0 {
		c.MinCalls = DefaultBreakerMinCalls
	}
	if c.OpenFor == 0 {
		c.OpenFor = DefaultBreakerOpenFor
	}
	if c.MaxOpenFor == 0 {
		c.MaxOpenFor = max(DefaultBreakerMaxOpenFor, c.OpenFor)
	}
	if c.HalfOpenProbes == 0 {
		c.HalfOpenProbes = DefaultBreakerHalfOpenProbes
	}
	if c.SlowStart == 0 {
		c.SlowStart = DefaultBreakerSlowStart
	}
	if c.SlowStartFrom == 0 {
		c.SlowStartFrom = DefaultBreakerSlowStartFrom
	}
	return c
}

// State is a breaker's state. Its zero value is StateClosed.
type State uint8

// The states of a breaker.
const (
	// StateClosed admits calls (all of them, or a ramping share during
	// slow start) and watches their outcomes.
	StateClosed State = iota
	// StateOpen refuses every call until its open period ends.
	StateOpen
	// StateHalfOpen admits HalfOpenProbes probe calls and refuses the rest.
	StateHalfOpen
)

var stateNames = [...]string{StateClosed: "closed", StateOpen: "open", StateHalfOpen: "half-open"}

// String returns "closed", "open" or "half-open".
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// MarshalText writes the state as its String, for events on the wire.
func (s State) MarshalText() ([]byte, error) {
	if int(s) >= len(stateNames) {
		return nil, fmt.Errorf("unknown breaker state %d", uint8(s))
	}
	return []byte(stateNames[s]), nil
}

// UnmarshalText reads "closed", "open" or "half-open".
func (s *State) UnmarshalText(b []byte) error {
	for i, n := range stateNames {
		if string(b) == n {
			*s = State(i)
			return nil
		}
	}
	return fmt.Errorf("unknown breaker state %q", b)
}

// Refusal says why a breaker refused a call.
type Refusal uint8

// The reasons for a refusal. All of them map to 503 CIRCUIT_OPEN.
const (
	// NotRefused is the Refusal of an admitted call.
	NotRefused Refusal = iota
	// RefusedOpen: the breaker is open.
	RefusedOpen
	// RefusedProbing: the breaker is half-open and all its probes are out.
	RefusedProbing
	// RefusedSlowStart: the breaker closed recently and sheds part of the
	// traffic while it ramps up.
	RefusedSlowStart
)

var refusalNames = [...]string{
	NotRefused:       "",
	RefusedOpen:      "circuit open",
	RefusedProbing:   "circuit half-open, probes in flight",
	RefusedSlowStart: "circuit closed recently, ramping up",
}

// String returns a short human text for messages ("circuit open"), or "" for
// NotRefused.
func (r Refusal) String() string {
	if int(r) < len(refusalNames) {
		return refusalNames[r]
	}
	return fmt.Sprintf("Refusal(%d)", uint8(r))
}

// Ticket is a breaker's answer to Allow. An admitted call passes its Ticket
// back to Record (or to Cancel) so the breaker knows in which state and
// period the call started: outcomes of calls admitted before the latest
// state change are ignored, so nothing is counted twice or against the
// wrong period. A Ticket belongs to the breaker that issued it.
type Ticket struct {
	// OK reports whether the call may go ahead.
	OK bool
	// RetryAfter, when the call is refused, hints when to try again
	// (for a Retry-After header): the rest of the open period, or at most
	// one second in half-open and slow start.
	RetryAfter time.Duration
	// Refusal says why the call was refused; NotRefused when OK.
	Refusal Refusal

	epoch uint64
	probe bool
}

// Transition is a change of a breaker's state, as returned by Record and
// taken by Apply (after a trip over NATS to the other workers of a pool).
type Transition struct {
	// From and To are the old and the new state.
	From, To State
	// Reason explains the change: "5 consecutive failures",
	// "failure ratio 0.62 ≥ 0.50 over 10s (26 calls)", "3 of 3 probes
	// succeeded", ...
	Reason string
	// At is when the change happened.
	At time.Time
	// OpenFor is the open period: the one that starts now when To is
	// StateOpen, the one the next trip will use otherwise.
	OpenFor time.Duration
	// OpenUntil is At+OpenFor when To is StateOpen, zero otherwise.
	OpenUntil time.Time
	// Gen orders transitions across the breakers of a pool (a Lamport
	// clock): a breaker's own transitions count up from the highest Gen it
	// has seen. Apply uses it to skip stale and repeated transitions.
	Gen uint64
}

// Breaker is a circuit breaker for one backend. It holds no timers: time is
// passed in, and a state that depends on the clock (open → half-open) is
// computed when asked. Every method is safe for concurrent use; Allow and
// Record take a short mutex and do not allocate.
//
// Use: t := b.Allow(now); if !t.OK, fail fast with 503 CIRCUIT_OPEN and
// Retry-After t.RetryAfter; otherwise make the call and report its outcome
// with b.Record(t, ...) — exactly once per admitted call, or Cancel(t) if the
// call never reached the backend. Publish the transitions Record returns to
// the pool; hand those of other workers to Apply.
//
// The change open → half-open happens by the clock and is not returned as a
// Transition: the open transition carries OpenUntil, when it happens.
type Breaker struct {
	cfg       BreakerConfig // defaults applied
	slowOn    bool          // a slow strategy is on
	ratioOn   bool          // a ratio strategy is on
	failPPM   int64         // FailureRatio in millionths
	slowPPM   int64         // SlowRatio in millionths
	rampFloor int64         // SlowStartFrom in millionths
	probeHint time.Duration // RetryAfter while probing

	mu         sync.Mutex
	state      State
	epoch      uint64        // bumped on every state entry; tickets carry it
	gen        uint64        // Lamport clock of published transitions
	since      time.Time     // when the current state began
	openFor    time.Duration // current open period; 0 after a close
	openUntil  time.Time
	consecFail int
	consecSlow int
	win        tallyWindow // [0] calls, [1] failures, [2] slow calls
	probesOut  int         // probes admitted in this half-open period
	probesOK   int
	ramping    bool
	rampFrom   time.Time
	rampAcc    int64 // admission credit in millionths of a call
}

// NewBreaker returns a closed breaker configured by cfg, or every problem of
// cfg (see BreakerConfig.Validate).
func NewBreaker(cfg BreakerConfig) (*Breaker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := cfg.withDefaults()
	b := &Breaker{
		cfg:       c,
		slowOn:    c.ConsecutiveSlow > 0 || c.SlowRatio > 0,
		ratioOn:   c.FailureRatio > 0 || c.SlowRatio > 0,
		failPPM:   millionths(c.FailureRatio),
		slowPPM:   millionths(c.SlowRatio),
		rampFloor: millionths(c.SlowStartFrom),
		probeHint: min(time.Second, c.OpenFor),
	}
	b.win.width = c.Window / tallyBuckets
	return b, nil
}

// Config returns the breaker's configuration with defaults filled in.
func (b *Breaker) Config() BreakerConfig { return b.cfg }

// State returns the breaker's state at now.
func (b *Breaker) State(now time.Time) State {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advanceLocked(now)
	return b.state
}

// Allow decides whether a call may start at now. Open refuses every call;
// half-open admits HalfOpenProbes probes and refuses the rest until they are
// recorded; closed admits every call, except during slow start, when it
// admits a share that grows linearly from SlowStartFrom to 1 over SlowStart.
// The share is applied deterministically with a credit counter: of n calls
// at share s, exactly ⌊n·s⌋ are admitted.
func (b *Breaker) Allow(now time.Time) Ticket {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advanceLocked(now)
	switch b.state {
	case StateOpen:
		return Ticket{RetryAfter: b.openUntil.Sub(now), Refusal: RefusedOpen}
	case StateHalfOpen:
		if b.probesOut >= b.cfg.HalfOpenProbes {
			return Ticket{RetryAfter: b.probeHint, Refusal: RefusedProbing}
		}
		b.probesOut++
		return Ticket{OK: true, epoch: b.epoch, probe: true}
	}
	if b.ramping {
		elapsed := max(now.Sub(b.rampFrom), 0)
		if elapsed >= b.cfg.SlowStart {
			b.ramping = false
		} else {
			share := b.rampFloor + int64(float64(ppmOne-b.rampFloor)*float64(elapsed)/float64(b.cfg.SlowStart))
			b.rampAcc += share
			if b.rampAcc < ppmOne {
				return Ticket{RetryAfter: min(time.Second, b.cfg.SlowStart-elapsed), Refusal: RefusedSlowStart}
			}
			b.rampAcc -= ppmOne
		}
	}
	return Ticket{OK: true, epoch: b.epoch}
}

// Record reports the outcome of a call admitted by t: its latency and whether
// it failed. It returns the transition it caused, if any, for the caller to
// publish. It ignores a refused ticket and one issued before the breaker's
// latest state change (the call started in another period).
//
// In closed, the outcome feeds every trip strategy, and the first one that
// reaches its threshold opens the breaker for OpenFor. In half-open, a failed
// probe (or a slow one, when a slow strategy is on) opens it again for twice
// the last open period, capped at MaxOpenFor; when all HalfOpenProbes probes
// succeed it closes, resets the open period and starts slow start.
func (b *Breaker) Record(t Ticket, now time.Time, latency time.Duration, failed bool) (tr Transition, changed bool) {
	if !t.OK {
		return Transition{}, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advanceLocked(now)
	if t.epoch != b.epoch {
		return Transition{}, false
	}
	slow := b.slowOn && latency > b.cfg.SlowCall
	if b.state == StateHalfOpen {
		switch {
		case failed:
			return b.openLocked(now, "probe failed"), true
		case slow:
			return b.openLocked(now, fmt.Sprintf("slow probe (%v > %v)", latency, b.cfg.SlowCall)), true
		}
		b.probesOK++
		if b.probesOK < b.cfg.HalfOpenProbes {
			return Transition{}, false
		}
		return b.closeLocked(now), true
	}
	// Closed (an open breaker has issued no ticket of the current epoch).
	if failed {
		b.consecFail++
	} else {
		b.consecFail = 0
	}
	if slow {
		b.consecSlow++
	} else {
		b.consecSlow = 0
	}
	if b.ratioOn {
		if s, ok := b.win.advance(now); ok {
			b.win.add(s, 0, 1)
			if failed {
				b.win.add(s, 1, 1)
			}
			if slow {
				b.win.add(s, 2, 1)
			}
		}
	}
	c := &b.cfg
	if c.ConsecutiveFailures > 0 && b.consecFail >= c.ConsecutiveFailures {
		return b.openLocked(now, fmt.Sprintf("%d consecutive failures", b.consecFail)), true
	}
	if c.ConsecutiveSlow > 0 && b.consecSlow >= c.ConsecutiveSlow {
		return b.openLocked(now, fmt.Sprintf("%d consecutive slow calls (> %v)", b.consecSlow, c.SlowCall)), true
	}
	if calls := b.win.total[0]; b.ratioOn && calls >= int64(c.MinCalls) {
		if n := b.win.total[1]; b.failPPM > 0 && n*ppmOne >= b.failPPM*calls {
			return b.openLocked(now, fmt.Sprintf("failure ratio %.2f ≥ %.2f over %v (%d calls)",
				float64(n)/float64(calls), c.FailureRatio, c.Window, calls)), true
		}
		if n := b.win.total[2]; b.slowPPM > 0 && n*ppmOne >= b.slowPPM*calls {
			return b.openLocked(now, fmt.Sprintf("slow-call ratio %.2f ≥ %.2f over %v (%d calls, slow > %v)",
				float64(n)/float64(calls), c.SlowRatio, c.Window, calls, c.SlowCall)), true
		}
	}
	return Transition{}, false
}

// Cancel gives back a ticket whose call never reached the backend (the
// caller gave up first), without counting an outcome: a half-open probe slot
// becomes free again. Cancel of a refused or outdated ticket does nothing.
func (b *Breaker) Cancel(t Ticket) {
	if !t.OK || !t.probe {
		return
	}
	b.mu.Lock()
	if t.epoch == b.epoch && b.state == StateHalfOpen && b.probesOut > 0 {
		b.probesOut--
	}
	b.mu.Unlock()
}

// Apply moves the breaker to the state of a transition made by another
// breaker for the same backend (another worker of the pool), and reports
// whether it did. To StateOpen: open until tr.OpenUntil, with tr.OpenFor as
// the period the next doubling starts from. To StateClosed: closed, with slow
// start ramping from tr.At. Other transitions are not shared and are ignored.
// Applying resets this breaker's counters and voids its outstanding tickets,
// so nothing is counted twice.
//
// The rule for stale and repeated transitions: tr is applied only if tr.Gen
// is greater than the highest Gen this breaker has made or applied, or equal
// to it with tr.At after the start of the current state (two workers changed
// state concurrently: the later change wins, on every worker). A transition
// applied or made here is therefore never applied again, and a breaker's own
// transitions echoed back to it are ignored. Applying raises this breaker's
// Gen to tr.Gen, so its next transition supersedes tr.
//
// A transition comes off the network and may be forged, so what it can do
// is bounded by this breaker's own configuration, whatever it says: tr.At
// is taken as now when it is later (a future At would hold a slow start at
// its floor, or an open period, for as long as it likes); the open period
// is at most MaxOpenFor, and the breaker opens until tr.At+MaxOpenFor at
// the latest; a Gen more than MaxGenJump above this breaker's is refused
// (it would push the pool's clock to its end, where no later transition
// could supersede it). The worst a forged transition can do is what the
// policy allows a failing backend: keep the circuit open for MaxOpenFor.
func (b *Breaker) Apply(tr Transition, now time.Time) bool {
	if tr.To != StateOpen && tr.To != StateClosed {
		return false
	}
	if tr.At.After(now) {
		tr.At = now
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advanceLocked(now)
	if tr.Gen < b.gen || (tr.Gen == b.gen && !tr.At.After(b.since)) || tr.Gen-b.gen > MaxGenJump {
		return false
	}
	b.gen = tr.Gen
	b.enterLocked(tr.To, tr.At)
	if tr.To == StateOpen {
		b.openFor = min(tr.OpenFor, b.cfg.MaxOpenFor)
		if b.openFor <= 0 {
			b.openFor = b.cfg.OpenFor
		}
		b.openUntil = tr.OpenUntil
		if b.openUntil.IsZero() {
			b.openUntil = tr.At.Add(b.openFor)
		}
		if latest := tr.At.Add(b.cfg.MaxOpenFor); b.openUntil.After(latest) {
			b.openUntil = latest
		}
		b.advanceLocked(now)
		return true
	}
	b.openFor = 0
	b.startRampLocked(tr.At)
	return true
}

// MaxGenJump is the largest step up of Gen that Apply accepts: far more
// transitions than a pool makes in its life (2^32 trips of a breaker that
// opens for 5 s take 680 years), far fewer than the 2^64 a forged event
// would need to wrap the clock around.
const MaxGenJump = 1 << 32

// advanceLocked moves open → half-open when the open period is over.
func (b *Breaker) advanceLocked(now time.Time) {
	if b.state == StateOpen && !now.Before(b.openUntil) {
		b.enterLocked(StateHalfOpen, b.openUntil)
	}
}

// enterLocked starts a new state period: it voids outstanding tickets and
// resets every counter.
func (b *Breaker) enterLocked(s State, at time.Time) {
	b.state = s
	b.epoch++
	b.since = at
	b.consecFail, b.consecSlow = 0, 0
	b.win.reset()
	b.probesOut, b.probesOK = 0, 0
	b.ramping, b.rampAcc = false, 0
}

func (b *Breaker) openLocked(now time.Time, reason string) Transition {
	from := b.state
	switch {
	case from != StateHalfOpen || b.openFor <= 0:
		b.openFor = b.cfg.OpenFor
	case b.openFor > b.cfg.MaxOpenFor/2:
		b.openFor = b.cfg.MaxOpenFor
	default:
		b.openFor *= 2
	}
	b.enterLocked(StateOpen, now)
	b.openUntil = now.Add(b.openFor)
	b.gen++
	return Transition{From: from, To: StateOpen, Reason: reason, At: now,
		OpenFor: b.openFor, OpenUntil: b.openUntil, Gen: b.gen}
}

func (b *Breaker) closeLocked(now time.Time) Transition {
	n := b.probesOK
	b.enterLocked(StateClosed, now)
	b.openFor = 0
	b.startRampLocked(now)
	b.gen++
	return Transition{From: StateHalfOpen, To: StateClosed, At: now, OpenFor: b.cfg.OpenFor, Gen: b.gen,
		Reason: fmt.Sprintf("%d of %d probes succeeded", n, b.cfg.HalfOpenProbes)}
}

func (b *Breaker) startRampLocked(from time.Time) {
	if b.cfg.SlowStart > 0 && b.rampFloor < ppmOne {
		b.ramping, b.rampFrom, b.rampAcc = true, from, 0
	}
}

// ppmOne is one whole in millionths: ratios and shares are kept as integers so
// that thresholds are exact (0.1×30 calls is 3 failures, not 3.0000000000000004).
const ppmOne = 1_000_000

func millionths(f float64) int64 { return int64(math.Round(f * ppmOne)) }

// tallyBuckets is the number of buckets of a sliding window.
const tallyBuckets = 10

// tallyWindow counts events over a time-based sliding window cut into
// tallyBuckets buckets, with running totals so reading them is O(1). Slots
// are numbered from the time of the first event (earlier ones are negative).
type tallyWindow struct {
	width   time.Duration
	started bool
	origin  time.Time
	head    int64 // newest slot (bucket number since origin) seen
	buckets [tallyBuckets][3]int64
	total   [3]int64
}

// advance moves the window forward to now's slot, expiring the buckets that
// fall out of it, and returns now's slot; ok is false when now is too old to
// count in the window.
func (w *tallyWindow) advance(now time.Time) (slot int64, ok bool) {
	if !w.started {
		w.started, w.origin = true, now
	}
	d := now.Sub(w.origin)
	slot = int64(d / w.width)
	if d < 0 && d%w.width != 0 {
		slot-- // round toward minus infinity
	}
	if slot <= w.head {
		return slot, slot > w.head-tallyBuckets
	}
	if slot-w.head >= tallyBuckets {
		w.buckets, w.total = [tallyBuckets][3]int64{}, [3]int64{}
	} else {
		for k := w.head + 1; k <= slot; k++ {
			bk := &w.buckets[(k%tallyBuckets+tallyBuckets)%tallyBuckets]
			for i := range w.total {
				w.total[i] -= bk[i]
			}
			*bk = [3]int64{}
		}
	}
	w.head = slot
	return slot, true
}

// add counts n events of kind i in slot, which advance returned with ok.
func (w *tallyWindow) add(slot int64, i int, n int64) {
	w.buckets[(slot%tallyBuckets+tallyBuckets)%tallyBuckets][i] += n
	w.total[i] += n
}

// reset forgets every event, keeping the time base.
func (w *tallyWindow) reset() {
	w.buckets, w.total = [tallyBuckets][3]int64{}, [3]int64{}
}
