package resilience

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// The behaviours of a rate rule (RuleConfig.Behavior).
const (
	// BehaviorReject admits at most Limit calls per Window (sliding window
	// of sub-buckets) and refuses the rest at once. The default.
	BehaviorReject = "reject"
	// BehaviorWarmUp is BehaviorReject whose limit starts at
	// Limit/ColdFactor after idle and climbs to Limit over WarmUp.
	BehaviorWarmUp = "warmup"
	// BehaviorQueue paces calls one every Window/Limit (leaky bucket); a
	// call that would wait longer than it may is refused.
	BehaviorQueue = "queue"
	// BehaviorConcurrency admits at most Limit calls in flight.
	BehaviorConcurrency = "concurrency"
)

// Defaults that NewLimiter and NewKeyed put in place of a RuleConfig's zero
// fields (only for the fields its behaviour uses).
const (
	// DefaultRateWindow is the window of the rate behaviours.
	DefaultRateWindow = time.Second
	// DefaultRateBuckets is the number of sub-buckets a window is cut into
	// (reject, warmup).
	DefaultRateBuckets = 10
	// DefaultColdFactor is how many times lower than Limit the cold limit
	// of a warm-up rule is (as in Sentinel).
	DefaultColdFactor = 3.0
	// DefaultWarmUp is the warm-up period (as in Sentinel).
	DefaultWarmUp = 10 * time.Second
	// DefaultMaxQueue is the longest a queue rule lets a call wait (as in
	// Sentinel).
	DefaultMaxQueue = 500 * time.Millisecond
	// DefaultMaxKeys is the number of key values a keyed limiter tracks.
	DefaultMaxKeys = 10000
)

// Bounds checked by RuleConfig.Validate.
const (
	// MaxRuleLimit is the largest Limit (and exception limit).
	MaxRuleLimit = 1 << 30
	// MinRateWindow is the shortest Window (and WarmUp).
	MinRateWindow = time.Millisecond
	// MaxRateWindow is the longest Window.
	MaxRateWindow = 24 * time.Hour
	// MaxRateBuckets is the largest Buckets.
	MaxRateBuckets = 1000
	// MaxColdFactor is the largest ColdFactor.
	MaxColdFactor = 100.0
	// MaxRuleWait bounds WarmUp and MaxQueue.
	MaxRuleWait = 24 * time.Hour
	// MaxRuleKeys is the largest MaxKeys.
	MaxRuleKeys = 1 << 24
)

// Limiter is one rate or concurrency limit: what the edge asks before it
// lets a call through. Every Limiter in this package is safe for concurrent
// use and does not allocate in Take.
type Limiter interface {
	// Take asks to admit one call at time now. maxWait is the longest the
	// caller can wait before passing, typically the time left before its
	// deadline; only queue limiters wait, and they also cap the wait at the
	// rule's MaxQueue. A negative maxWait counts as zero.
	//
	// An admitted call must sleep Decision.Wait (zero except for queues)
	// and then go ahead; it must call Decision.Release when it ends (a
	// no-op except for concurrency limits). A refused call gets
	// Decision.RetryAfter. Take never blocks and never fails.
	Take(now time.Time, maxWait time.Duration) Decision
}

// Decision is a limiter's answer to Take.
type Decision struct {
	// Allowed reports whether the call may go ahead (after Wait).
	Allowed bool
	// Wait is how long an admitted call must wait before it goes ahead:
	// its reserved slot in a queue. Zero for the other behaviours. Always
	// ≤ the maxWait given to Take.
	Wait time.Duration
	// RetryAfter, for a refused call, is how long until the same call
	// (same maxWait) would be admitted if nothing else were admitted
	// meanwhile — the value for a Retry-After header. It is exact for
	// reject and queue, an estimate for warmup (whose limit moves), and 0
	// when unknown: concurrency limits, and exceptions with limit 0.
	RetryAfter time.Duration

	permit Permit
}

// Release ends an admitted call: it gives back the call's slot of a
// concurrency limit. It is a no-op for rate limits and refused calls, and
// idempotent: releasing twice, or releasing a copy, frees the slot once.
func (d Decision) Release() { d.permit.Release() }

// RuleConfig configures one limiting rule. Each field maps 1:1 to a field of
// a rate-limit rule in a registry API entry (JSON name in brackets), and
// validation errors name fields by their JSON name. A zero field takes its
// default when the behaviour uses it; a field the behaviour does not use
// must stay zero.
//
// Which key a rule limits by (API, app, client IP, header, parameter) is the
// edge's business: it builds the key string and hands it to a Keyed.
type RuleConfig struct {
	// Behavior is "reject" (default), "warmup", "queue" or "concurrency"
	// [behavior]; see the Behavior constants.
	Behavior string
	// Limit is the number of calls admitted per Window, or in flight for
	// concurrency [limit]; 1 to MaxRuleLimit. Required.
	Limit int
	// Window is the period Limit counts over [window]: "1s", "1m", "1h" or
	// any duration from 1ms to 24h. Default 1s. Not for concurrency.
	Window time.Duration
	// Buckets is the number of sub-buckets the sliding window of reject
	// and warmup is cut into [buckets]; 1 to 1000, and Window must be a
	// whole number of nanoseconds per bucket. Default 10. More buckets
	// make the window slide more smoothly.
	Buckets int
	// ColdFactor (> 1) is how many times lower than Limit the limit of a
	// cold warmup rule is [cold_factor]. Default 3. Warmup only.
	ColdFactor float64
	// WarmUp is how long a warmup rule takes to climb from cold to Limit
	// under steady demand, and to cool down when idle [warm_up]. Default
	// 10s. Warmup only.
	WarmUp time.Duration
	// MaxQueue is the longest a queue rule lets a call wait for its slot
	// [max_queue]; the caller's own maxWait (its deadline) may cut it
	// shorter. Default 500ms. Queue only.
	MaxQueue time.Duration
	// MaxKeys is the most key values a Keyed limiter tracks at once
	// [max_keys]; the least recently used value is evicted past it.
	// Default 10000. Keyed limiters only.
	MaxKeys int
	// Exceptions gives specific key values their own limit instead of
	// Limit [exceptions], as Sentinel's hot-parameter item list: e.g.
	// {"merchant-42": 500}. A limit of 0 refuses every call of that value.
	// Keyed limiters only.
	Exceptions map[string]int
}

// Validate reports every problem of c at once (joined with errors.Join),
// each naming its field by its JSON name. It checks c as written, with
// defaults for the zero fields its behaviour uses. MaxKeys and Exceptions
// are checked as for NewKeyed; NewLimiter also refuses them.
func (c RuleConfig) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{field}, args...)...))
	}
	notFor := func(field string, set bool, b string) {
		if set {
			bad(field, "not used by behavior %q; leave it out", b)
		}
	}
	d := c.withDefaults()
	b := d.Behavior
	rate, windowed := false, false
	switch b {
	case BehaviorReject, BehaviorWarmUp:
		rate, windowed = true, true
	case BehaviorQueue:
		rate = true
	case BehaviorConcurrency:
	default:
		bad("behavior", "%q is not one of reject, warmup, queue, concurrency", c.Behavior)
		return errors.Join(errs...) // the other fields depend on it
	}
	if c.Limit < 1 || c.Limit > MaxRuleLimit {
		bad("limit", "%d is not in [1, %d]", c.Limit, MaxRuleLimit)
	}
	if rate {
		if d.Window < MinRateWindow || d.Window > MaxRateWindow {
			bad("window", "%v is not in [%v, %v]", d.Window, MinRateWindow, MaxRateWindow)
		}
	} else {
		notFor("window", c.Window != 0, b)
	}
	if windowed {
		switch {
		case d.Buckets < 1 || d.Buckets > MaxRateBuckets:
			bad("buckets", "%d is not in [1, %d]", d.Buckets, MaxRateBuckets)
		case d.Window > 0 && d.Window%time.Duration(d.Buckets) != 0:
			bad("buckets", "window %v does not split into %d buckets of whole nanoseconds", d.Window, d.Buckets)
		}
	} else {
		notFor("buckets", c.Buckets != 0, b)
	}
	if b == BehaviorWarmUp {
		if math.IsNaN(d.ColdFactor) || d.ColdFactor <= 1 || d.ColdFactor > MaxColdFactor {
			bad("cold_factor", "%v is not in (1, %v]", d.ColdFactor, MaxColdFactor)
		}
		if d.WarmUp < MinRateWindow || d.WarmUp > MaxRuleWait {
			bad("warm_up", "%v is not in [%v, %v]", d.WarmUp, MinRateWindow, MaxRuleWait)
		}
	} else {
		notFor("cold_factor", c.ColdFactor != 0, b)
		notFor("warm_up", c.WarmUp != 0, b)
	}
	if b == BehaviorQueue {
		if d.MaxQueue <= 0 || d.MaxQueue > MaxRuleWait {
			bad("max_queue", "%v is not in (0, %v]", d.MaxQueue, MaxRuleWait)
		}
	} else {
		notFor("max_queue", c.MaxQueue != 0, b)
	}
	if d.MaxKeys < 1 || d.MaxKeys > MaxRuleKeys {
		bad("max_keys", "%d is not in [1, %d]", d.MaxKeys, MaxRuleKeys)
	}
	for v, n := range c.Exceptions {
		if n < 0 || n > MaxRuleLimit {
			bad("exceptions", "limit %d of %q is not in [0, %d]", n, v, MaxRuleLimit)
		}
	}
	return errors.Join(errs...)
}

// withDefaults fills the zero fields the behaviour uses.
func (c RuleConfig) withDefaults() RuleConfig {
	if c.Behavior == "" {
		c.Behavior = BehaviorReject
	}
	switch c.Behavior {
	case BehaviorReject, BehaviorWarmUp, BehaviorQueue:
		if c.Window == 0 {
			c.Window = DefaultRateWindow
		}
	}
	switch c.Behavior {
	case BehaviorReject, BehaviorWarmUp:
		if c.Buckets == 0 {
			c.Buckets = DefaultRateBuckets
		}
	}
	if c.Behavior == BehaviorWarmUp {
		if c.ColdFactor == 0 {
			c.ColdFactor = DefaultColdFactor
		}
		if c.WarmUp == 0 {
			c.WarmUp = DefaultWarmUp
		}
	}
	if c.Behavior == BehaviorQueue && c.MaxQueue == 0 {
		c.MaxQueue = DefaultMaxQueue
	}
	if c.MaxKeys == 0 {
		c.MaxKeys = DefaultMaxKeys
	}
	return c
}

// NewLimiter returns the limiter of one rule: a *RejectLimiter,
// *WarmUpLimiter, *QueueLimiter or *Concurrency according to
// cfg.Behavior. It returns every problem of cfg (see RuleConfig.Validate);
// MaxKeys and Exceptions belong to keyed limiters (NewKeyed) and are
// refused here.
func NewLimiter(cfg RuleConfig) (Limiter, error) {
	err := cfg.Validate()
	if cfg.MaxKeys != 0 || len(cfg.Exceptions) != 0 {
		err = errors.Join(err, errors.New("max_keys, exceptions: only for keyed limiters (NewKeyed)"))
	}
	if err != nil {
		return nil, err
	}
	return newRuleLimiter(cfg.withDefaults(), cfg.Limit), nil
}

// keyedLimiter is what a Keyed stores per key value.
type keyedLimiter interface {
	Limiter
	// takeKeyed is Take for a limiter that only a Keyed reaches: the
	// Keyed's shard lock already serializes it.
	takeKeyed(now time.Time, maxWait time.Duration) Decision
	// reset makes the limiter fresh with the given limit (≥ 1), for a new
	// key value; it reports false if it cannot (the caller builds a new
	// one). Called under the shard lock, only when busy is false.
	reset(limit int) bool
	// busy reports whether the limiter must not be evicted (calls in
	// flight).
	busy() bool
}

// newRuleLimiter builds the limiter of a validated rule (defaults applied)
// with the given limit; 0 gives a limiter that refuses everything.
func newRuleLimiter(c RuleConfig, limit int) keyedLimiter {
	if limit == 0 {
		return refuseAll{}
	}
	switch c.Behavior {
	case BehaviorWarmUp:
		return newWarmUp(c, limit)
	case BehaviorQueue:
		return newQueue(c, limit)
	case BehaviorConcurrency:
		return newConcurrency(limit)
	default:
		return newReject(c, limit)
	}
}

// refuseAll is the limiter of an exception with limit 0.
type refuseAll struct{}

func (refuseAll) Take(time.Time, time.Duration) Decision      { return Decision{} }
func (refuseAll) takeKeyed(time.Time, time.Duration) Decision { return Decision{} }
func (refuseAll) reset(int) bool                              { return false }
func (refuseAll) busy() bool                                  { return false }

// rateWindow counts admitted calls in a sliding window of len(counts)
// buckets of width each, Sentinel LeapArray style. Bucket e covers
// [origin+e×width, origin+(e+1)×width); origin is the first call's time.
// The window at a time in bucket e is buckets e-n+1 … e.
type rateWindow struct {
	counts  []uint32
	width   time.Duration
	origin  time.Time
	started bool
	head    int64 // bucket number of the newest bucket
	headIdx int   // its index in counts
	sum     int64 // total of counts
}

func newRateWindow(c RuleConfig) rateWindow {
	return rateWindow{counts: make([]uint32, c.Buckets), width: c.Window / time.Duration(c.Buckets)}
}

func (w *rateWindow) reset() {
	clear(w.counts)
	w.started, w.head, w.headIdx, w.sum = false, 0, 0, 0
}

// advance slides the window to now, emptying the buckets that fell out.
// A time before the newest bucket (a clock stepping back) counts in the
// newest bucket.
func (w *rateWindow) advance(now time.Time) {
	if !w.started {
		w.origin, w.started = now, true
		return
	}
	el := now.Sub(w.origin)
	if el < 0 {
		return
	}
	e := int64(el / w.width)
	d := e - w.head
	if d <= 0 {
		return
	}
	w.head = e
	n := len(w.counts)
	if d >= int64(n) {
		clear(w.counts)
		w.sum = 0
		return
	}
	for ; d > 0; d-- {
		w.headIdx++
		if w.headIdx == n {
			w.headIdx = 0
		}
		w.sum -= int64(w.counts[w.headIdx])
		w.counts[w.headIdx] = 0
	}
}

// add counts one admitted call in the newest bucket.
func (w *rateWindow) add() {
	w.counts[w.headIdx]++
	w.sum++
}

// retryAfter returns how long after now the window, left alone, holds fewer
// than limit calls: the start of the first bucket after enough of the
// oldest buckets have fallen out. Call it after advance(now), with
// w.sum ≥ limit ≥ 1.
func (w *rateWindow) retryAfter(now time.Time, limit int64) time.Duration {
	n := len(w.counts)
	need := w.sum - limit + 1
	idx := w.headIdx
	var dropped int64
	for i := range n {
		idx++
		if idx == n {
			idx = 0
		}
		dropped += int64(w.counts[idx])
		if dropped >= need {
			e := w.head - int64(n-1) + int64(i) // this bucket's number
			return w.origin.Add(time.Duration(e+int64(n)) * w.width).Sub(now)
		}
	}
	return w.origin.Add(time.Duration(w.head+int64(n)) * w.width).Sub(now) // not reached
}

// RejectLimiter admits at most Limit calls per Window and refuses the rest
// at once: Sentinel's default flow control, counted in a sliding window of
// Buckets sub-buckets of width w = Window/Buckets, measured from the first
// call.
//
// A call passes when the calls admitted in its bucket and the Buckets−1
// before it number fewer than Limit. Hence the guarantee:
//   - in every interval of length Window−w, at most Limit calls pass (over a
//     whole Window at most Limit plus the calls of one bucket);
//   - calls spread evenly at Limit per Window all pass;
//   - a burst of any size at one instant admits exactly Limit.
//
// A refusal's RetryAfter is exact: the start of the first bucket at which,
// with no other admission, the window holds fewer than Limit calls. maxWait
// is ignored.
type RejectLimiter struct {
	mu    sync.Mutex
	limit int64
	win   rateWindow
}

func newReject(c RuleConfig, limit int) *RejectLimiter {
	return &RejectLimiter{limit: int64(limit), win: newRateWindow(c)}
}

// Take admits the call if the sliding window holds fewer than Limit calls;
// see RejectLimiter.
func (l *RejectLimiter) Take(now time.Time, maxWait time.Duration) Decision {
	l.mu.Lock()
	d := l.takeKeyed(now, maxWait)
	l.mu.Unlock()
	return d
}

func (l *RejectLimiter) takeKeyed(now time.Time, _ time.Duration) Decision {
	l.win.advance(now)
	if l.win.sum < l.limit {
		l.win.add()
		return Decision{Allowed: true}
	}
	return Decision{RetryAfter: l.win.retryAfter(now, l.limit)}
}

func (l *RejectLimiter) reset(limit int) bool {
	l.limit = int64(limit)
	l.win.reset()
	return true
}

func (l *RejectLimiter) busy() bool { return false }

// WarmUpLimiter is a RejectLimiter whose limit follows a warm-up ramp, as
// Sentinel's WarmUpController does, with the arithmetic of Guava's
// SmoothWarmingUp: after idle (and when new) the limiter is cold and admits
// about Limit/ColdFactor per Window; under demand it climbs to Limit over
// WarmUp, and when idle it cools back over WarmUp.
//
// Precisely, with the stable interval s = Window/Limit and the cold
// interval c = ColdFactor×s, the limiter stores tokens S between 0 and
// max = T + 2×WarmUp/(s+c), with T = WarmUp/(2s); a new limiter is full
// (cold). The interval at S is I(S) = s for S ≤ T, rising linearly to c at
// S = max. A call passes when both hold:
//   - the sliding window (as RejectLimiter's) holds fewer than
//     ⌈Window/I(S)⌉ calls (at least 1, at most Limit);
//   - the costs of the calls admitted so far, each the time ∫I over the
//     token it took, run at most one Window ahead of the clock (the first
//     call after idle always fits).
//
// Time not covered by the costs (idle time) refills tokens at max per
// WarmUp. Under saturating demand Guava's interval falls as
// I(t) = √(c² − (c²−s²)·t/WarmUp), reaching s at t = WarmUp; the calls
// admitted per window follow that ramp, at most one window ahead of it
// (the burst a window allows): from about Limit/ColdFactor to Limit, slowly
// at first (for ColdFactor 3, 1/√5 ≈ 45% of Limit halfway), and Limit by
// WarmUp at the latest. A burst at one instant from cold admits what Guava
// paces over one Window: about Limit/ColdFactor when WarmUp ≫ Window.
// Demand below the cold rate keeps the limiter cold (and all of it passes).
//
// RetryAfter is exact while the costs run ahead of the clock; past that,
// idle time may lower the limit, so it is a lower bound: no call passes
// earlier. maxWait is ignored.
type WarmUpLimiter struct {
	mu     sync.Mutex
	win    rateWindow
	limit  float64 // Limit
	cold   float64 // ColdFactor − 1
	window float64 // Window, ns
	warmUp float64 // WarmUp, ns

	s        float64 // stable interval, ns
	k        float64 // slope of I above T, ns per token
	thr, max float64 // T and max, tokens
	coolDown float64 // ns per refilled token

	tokens float64
	vNs    int64   // virtual time since origin: end of the paid costs
	vFrac  float64 // its fraction of a ns
}

func newWarmUp(c RuleConfig, limit int) *WarmUpLimiter {
	l := &WarmUpLimiter{win: newRateWindow(c), cold: c.ColdFactor - 1,
		window: float64(c.Window), warmUp: float64(c.WarmUp)}
	l.reset(limit)
	return l
}

// reset makes the limiter new (cold) with the given limit.
func (l *WarmUpLimiter) reset(limit int) bool {
	l.win.reset()
	l.limit = float64(limit)
	s := l.window / l.limit
	c := s * (l.cold + 1)
	l.s = s
	l.thr = 0.5 * l.warmUp / s
	l.max = l.thr + 2*l.warmUp/(s+c)
	l.k = (c - s) / (l.max - l.thr)
	l.coolDown = l.warmUp / l.max
	l.tokens = l.max
	l.vNs, l.vFrac = 0, 0
	return true
}

// Take admits the call if the sliding window holds fewer calls than the
// current warm-up limit; see WarmUpLimiter.
func (l *WarmUpLimiter) Take(now time.Time, maxWait time.Duration) Decision {
	l.mu.Lock()
	d := l.takeKeyed(now, maxWait)
	l.mu.Unlock()
	return d
}

func (l *WarmUpLimiter) takeKeyed(now time.Time, _ time.Duration) Decision {
	l.win.advance(now)
	el := int64(now.Sub(l.win.origin))
	if el > l.vNs { // idle since the paid costs ended: cool down
		idle := float64(el-l.vNs) - l.vFrac
		l.tokens = math.Min(l.max, l.tokens+idle/l.coolDown)
		l.vNs, l.vFrac = el, 0
	}
	// The cost of the next token: ∫ I(p) dp over [S−1, S], with I = s
	// below T (and for the part of a token below 0).
	hi := l.tokens
	lo := math.Max(0, hi-1)
	a, b := math.Max(0, lo-l.thr), math.Max(0, hi-l.thr)
	cost := l.s + l.k/2*(b*b-a*a)
	ahead := float64(l.vNs-el) + l.vFrac // paid costs not yet elapsed
	lim := l.currentLimit()
	full := l.win.sum >= lim
	// Half a nanosecond of slack absorbs float rounding: Limit stable
	// costs fill a window exactly.
	over := ahead + cost - l.window - 0.5 // > 0: the costs would run too far ahead
	paced := ahead > 0 && over > 0
	if full || paced {
		var ra time.Duration
		if full {
			ra = l.win.retryAfter(now, lim)
		}
		if paced {
			if cost > l.window { // fits only once the costs have elapsed
				over = ahead
			}
			ra = max(ra, time.Duration(math.Ceil(over)))
		}
		return Decision{RetryAfter: ra}
	}
	l.win.add()
	l.tokens = lo
	f := l.vFrac + cost
	w := math.Floor(f)
	l.vNs += int64(w)
	l.vFrac = f - w
	return Decision{Allowed: true}
}

// currentLimit is ⌈Limit / (I(S)/s)⌉, clamped to [1, Limit].
func (l *WarmUpLimiter) currentLimit() int64 {
	frac := (l.tokens - l.thr) / (l.max - l.thr)
	frac = math.Min(1, math.Max(0, frac))
	n := int64(math.Ceil(l.limit/(1+l.cold*frac) - 1e-9))
	return min(max(n, 1), int64(l.limit))
}

func (l *WarmUpLimiter) busy() bool { return false }

// QueueLimiter is a leaky bucket, as Sentinel's RateLimiterController: calls
// pass one every Window/Limit, exactly (the interval is kept as a fraction,
// so Limit per Window holds over any span). A call gets the next free slot
// and must wait until it: Decision.Wait. The slot is reserved at once, so
// concurrent callers get distinct slots; a caller that gives up wastes its
// slot. A call whose wait would exceed min(maxWait, MaxQueue) is refused
// (and reserves nothing), so the queue never holds more than
// 1 + MaxQueue×Limit/Window calls. After idle the first call passes at
// once; idle time earns no credit (no bursts).
//
// A refusal's RetryAfter is the wait minus the allowed wait: when the same
// call would fit.
type QueueLimiter struct {
	mu       sync.Mutex
	window   int64 // Window, ns
	lim      int64 // Limit
	q, r     int64 // interval = q + r/lim ns
	maxQueue time.Duration
	origin   time.Time
	started  bool
	next     int64 // ns since origin of the next free slot
	rem      int64 // its fraction, in 1/lim ns
}

func newQueue(c RuleConfig, limit int) *QueueLimiter {
	l := &QueueLimiter{maxQueue: c.MaxQueue, window: int64(c.Window)}
	l.reset(limit)
	return l
}

// Take reserves the next slot if it is at most min(maxWait, MaxQueue)
// away; see QueueLimiter.
func (l *QueueLimiter) Take(now time.Time, maxWait time.Duration) Decision {
	l.mu.Lock()
	d := l.takeKeyed(now, maxWait)
	l.mu.Unlock()
	return d
}

func (l *QueueLimiter) takeKeyed(now time.Time, maxWait time.Duration) Decision {
	if !l.started {
		l.origin, l.started = now, true
	}
	el := max(int64(now.Sub(l.origin)), 0)
	if l.next < el {
		l.next, l.rem = el, 0
	}
	wait := time.Duration(l.next - el)
	allowed := max(min(maxWait, l.maxQueue), 0)
	if wait > allowed {
		return Decision{RetryAfter: wait - allowed}
	}
	l.next += l.q
	l.rem += l.r
	if l.rem >= l.lim {
		l.next++
		l.rem -= l.lim
	}
	return Decision{Allowed: true, Wait: wait}
}

func (l *QueueLimiter) reset(limit int) bool {
	l.lim = int64(limit)
	l.q, l.r = l.window/l.lim, l.window%l.lim
	l.started, l.next, l.rem = false, 0, 0
	return true
}

func (l *QueueLimiter) busy() bool { return false }
