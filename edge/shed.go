package edge

import (
	"maps"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetway-gw/jetway/bus"
)

// Load shedding at the edge: adaptive client-side throttling (Google SRE
// book, "Handling Overload"). For each API tier the edge counts, over the
// last Window, the calls it meant to send (requests) and those the
// workers took (accepts: every reply but OVERLOADED). That share of the
// calls is refused here, before the NATS trip:
//
//	max(0, (requests − K·accepts) / (requests + 1))
//
// evenly (one call in 1/(1 − share) passes; Shedding.Random draws each
// call's fate instead, as the book does), so that the workers still get about K calls per call they can take:
// enough to keep their bulkheads full and to see at once when they take
// more, while the rest of an overload costs the edge a microsecond instead
// of a trip to a worker that refuses it. Calls shed here count as
// requests, never as accepts, which is what keeps the share stable.
//
// The share is capped at MaxShare (0.9): however far past capacity, one
// call in ten still goes to the workers. Without a cap, an overload a
// thousand times capacity (a flood) drives the share to 0.999, and once
// it ends the calls still shed keep it there — each counts as a request
// with no accept, and one call in a thousand is too few for the workers'
// accepts to pull it down — so an API with steady traffic stayed shed for
// well past a window after its workers were idle again. With one call in
// ten passing, their accepts end the shedding within about a window of
// the overload's end, whatever its size. Envoy's admission control caps
// its rejection probability the same way (at 0.8 by default).
//
// Only an OVERLOADED reply (the worker's bulkhead) or a shed call moves
// the share off zero: an API whose workers take what they are sent has
// K·accepts ≥ requests and is never shed; timeouts, 5xx and missing
// workers are not overload and count for nothing here.

// Shedding configures load shedding at the edge. The zero value sheds
// evenly, with DefaultShedK and DefaultShedWindow.
type Shedding struct {
	// Off sends every call to the workers, which refuse what their
	// bulkhead cannot take (503 OVERLOADED after a NATS round trip).
	Off bool
	// K is how many calls the edge goes on sending per call the workers
	// accept, while they refuse some; 0 means DefaultShedK, and less
	// than 1 is taken as 1 (which would shed calls the workers could
	// take).
	K float64
	// Window is how far back the replies of an API count; 0 means
	// DefaultShedWindow. It is kept in shedBuckets buckets.
	Window time.Duration
	// Random sheds each call at random with the share, as the SRE book
	// does, instead of evenly (one call in 1/(1 − share) passes). The
	// workers' bulkhead queues nothing: the random gaps between the calls
	// that pass leave its slots idle more than even pacing does
	// (bench/README.md, "Load shedding": with K = 2 and a bulkhead of 4,
	// goodput 0.81 × capacity random, 0.89 even).
	Random bool
	// MaxShare is the largest share of calls shed, in (0, 1]; 0 (or
	// less) means DefaultShedMaxShare, more than 1 is 1: the SRE book's
	// uncapped throttle.
	MaxShare float64
}

const (
	// DefaultShedK: the workers are sent three times what they accept.
	// The SRE book says 2, for servers that queue; a worker's bulkhead
	// queues nothing, so a call that arrives while its slots are full is
	// lost, and one that would have come just after a slot freed is
	// missed. At 16× capacity with a bulkhead of 4, K = 2 gave 0.89 ×
	// capacity, K = 3 0.93 (bench/README.md, "Load shedding"); the price
	// is a third more trips refused by the workers, still 5× fewer than
	// without shedding.
	DefaultShedK = 3
	// DefaultShedWindow: the SRE book keeps two minutes of history for
	// long-lived RPC clients. An OVERLOADED reply is an explicit and
	// immediate signal, so a shorter window loses little: ten seconds
	// hold thousands of replies at the rates where overload matters,
	// and capacity that returns (a new worker, a burst that ended) is
	// fully used again within ten seconds, not two minutes.
	DefaultShedWindow = 10 * time.Second
	// shedBuckets is how many buckets a window is kept in: 1 s each by
	// default, so the share moves in steps of a tenth of the window.
	shedBuckets = 10
	// shedRetryAfter is the Retry-After of a shed call, in seconds: the
	// share changes at most once a bucket.
	shedRetryAfter = 1
	// DefaultShedMaxShare: at most nine calls in ten are shed. At 16×
	// capacity the share is 1 − K/16 ≈ 0.81, below the cap, which only
	// binds past 30× capacity: there the workers are sent a tenth of the
	// calls instead of three times what they take, refusals that cost
	// them a NATS trip each and no backend call.
	DefaultShedMaxShare = 0.9
)

// shedRule is how a shedder decides: k, the share's cap, and u, a draw
// in [0, 1) (Random), or nil for even pacing.
type shedRule struct {
	k, most float64
	u       func() float64
}

// shedder is the edge's shedding state: a throttle per API tier, by
// API.Key, so that it survives the registry's rebuilds of the routes. The
// map is copied on write: a request reads it without a lock, and only the
// first call of a tier (or a sweep) takes mu, which nothing else takes.
type shedder struct {
	off   bool
	rule  shedRule
	width int64 // a bucket's span, ns

	mu    sync.Mutex
	apis  atomic.Pointer[map[string]*throttle]
	sweep atomic.Int64 // the slot from which the next sweep of idle throttles is due
}

func newShedder(o Shedding) *shedder {
	s := &shedder{off: o.Off, rule: shedRule{k: o.K, most: min(o.MaxShare, 1)}, width: int64(o.Window / shedBuckets)}
	if o.Random {
		s.rule.u = rand.Float64 // math/rand/v2: per-thread state, no lock
	}
	// Written so that NaN, which fails every comparison, takes the
	// default: a NaN share would shed every call of every API.
	switch {
	case o.K == 0 || math.IsNaN(o.K):
		s.rule.k = DefaultShedK
	case !(o.K >= 1):
		s.rule.k = 1
	}
	if !(s.rule.most > 0) {
		s.rule.most = DefaultShedMaxShare
	}
	if o.Window <= 0 {
		s.width = int64(DefaultShedWindow / shedBuckets)
	}
	s.width = max(s.width, 1)
	s.apis.Store(&map[string]*throttle{})
	return s
}

// slot is the bucket number of time t.
func (s *shedder) slot(t time.Time) int64 { return t.UnixNano() / s.width }

// of returns the throttle of an API tier, made on its first call.
func (s *shedder) of(rt *route) *throttle {
	if t := (*s.apis.Load())[rt.key]; t != nil {
		return t
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := *s.apis.Load()
	if t := cur[rt.key]; t != nil {
		return t
	}
	t := newThrottle("api " + rt.api.Name + ": its workers are refusing calls (OVERLOADED), so the edge shed this one before sending it; retry later")
	next := maps.Clone(cur)
	next[rt.key] = t
	s.apis.Store(&next)
	return t
}

// tidy drops, once a window, the throttles of tiers idle for a whole
// window that never shed: an idle throttle holds nothing a new one would
// not (every bucket is out of the window), and a deleted API's would
// stay forever. One that shed is kept for its count.
func (s *shedder) tidy(slot int64) {
	next := s.sweep.Load()
	if slot < next || !s.sweep.CompareAndSwap(next, slot+shedBuckets) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := *s.apis.Load()
	kept := make(map[string]*throttle, len(cur))
	for k, t := range cur {
		if t.shed.Load() > 0 || !t.idle(slot) {
			kept[k] = t
		}
	}
	if len(kept) < len(cur) {
		s.apis.Store(&kept)
	}
}

// shedCount is how many calls of the tier key this edge has shed.
func (s *shedder) shedCount(key string) int64 {
	if t := (*s.apis.Load())[key]; t != nil {
		return t.shed.Load()
	}
	return 0
}

// throttle is one API tier's replies over the window, in a ring of
// buckets, each stamped with its slot. All atomics: a bucket that comes
// round again is reset by whoever first sees it stale, and a count added
// in that instant may be lost, which the share does not notice.
type throttle struct {
	msg string // the refusal's message, made once
	// over is the last slot with an OVERLOADED reply or a shed call;
	// until a window has passed since, calls need not look at the
	// buckets (never shed).
	over atomic.Int64
	shed atomic.Int64 // calls shed since the throttle was made
	// pace sums, in paceUnits, the share each call had of passing: a
	// call passes when it makes the sum cross a whole unit.
	pace    atomic.Int64
	buckets [shedBuckets]shedBucket
}

type shedBucket struct {
	slot     atomic.Int64
	requests atomic.Int64
	accepts  atomic.Int64
}

func newThrottle(msg string) *throttle {
	t := &throttle{msg: msg}
	t.over.Store(-1 << 62) // long ago
	for i := range t.buckets {
		t.buckets[i].slot.Store(-1 << 62)
	}
	return t
}

// bucket is the bucket of slot, reset if it still holds an older one; nil
// when it holds a newer one already (the slot is out of the window).
func (t *throttle) bucket(slot int64) *shedBucket {
	b := &t.buckets[uint64(slot)%shedBuckets]
	for {
		old := b.slot.Load()
		switch {
		case old == slot:
			return b
		case old > slot:
			return nil
		case b.slot.CompareAndSwap(old, slot):
			b.requests.Store(0)
			b.accepts.Store(0)
			return b
		}
	}
}

// odds is the share of calls to shed at slot: (requests − k·accepts) /
// (requests + 1) over the buckets in the window, at least 0.
func (t *throttle) odds(slot int64, k float64) float64 {
	if slot-t.over.Load() >= shedBuckets {
		return 0 // no refusal in the window: the fast path of every call of a healthy API
	}
	var req, acc int64
	for i := range t.buckets {
		b := &t.buckets[i]
		if s := b.slot.Load(); s > slot-shedBuckets && s <= slot {
			req += b.requests.Load()
			acc += b.accepts.Load()
		}
	}
	return max(0, (float64(req)-k*float64(acc))/float64(req+1))
}

// share is the share of calls to shed at slot under r: odds, capped.
func (t *throttle) share(slot int64, r shedRule) float64 {
	return min(t.odds(slot, r.k), r.most)
}

// paceUnit is one call in throttle.pace.
const paceUnit = 1 << 20

// sheds decides one call at slot: true when it is shed, which counts it
// as a request the workers did not accept. With r.u (uniform in [0, 1))
// a call is shed at random with the share, else evenly: of every
// 1/(1 − share) calls one passes.
func (t *throttle) sheds(slot int64, r shedRule) bool {
	return t.shedsAt(slot, t.share(slot, r), r.u)
}

// shedsAt is sheds with the share p already known.
func (t *throttle) shedsAt(slot int64, p float64, u func() float64) bool {
	if !(p > 0) {
		return false
	}
	if u != nil {
		if u() >= p {
			return false
		}
	} else {
		d := int64((1 - p) * paceUnit)
		if n := t.pace.Add(d); n/paceUnit != (n-d)/paceUnit {
			return false
		}
	}
	if b := t.bucket(slot); b != nil {
		b.requests.Add(1)
	}
	t.overAt(slot)
	t.shed.Add(1)
	return true
}

// note counts a worker's reply to a call made at slot.
func (t *throttle) note(slot int64, overloaded bool) {
	b := t.bucket(slot)
	if b == nil {
		return // older than the window
	}
	b.requests.Add(1)
	if overloaded {
		t.overAt(slot)
	} else {
		b.accepts.Add(1)
	}
}

// overAt moves over to slot (written only when it changes: once a bucket,
// not once a call).
func (t *throttle) overAt(slot int64) {
	if t.over.Load() < slot {
		t.over.Store(slot)
	}
}

// idle reports whether nothing was counted within the window before slot.
func (t *throttle) idle(slot int64) bool {
	for i := range t.buckets {
		if t.buckets[i].slot.Load() > slot-shedBuckets {
			return false
		}
	}
	return true
}

// shed is the step that refuses a call here, before the NATS trip, when
// the API's workers are refusing calls: with the share its throttle
// gives (throttle.odds), which is 0 for an API they are not refusing.
// A stale answer, when the API's cache may serve one on an error, is
// served instead. Async calls never get here (enqueue ends them).
func (c *call) shed() error {
	s := c.e.shed
	if s.off {
		return nil
	}
	t := s.of(c.rt)
	slot := s.slot(c.started)
	p := t.share(slot, s.rule)
	if !(p > 0) {
		return nil // the fast path of every call of a healthy API
	}
	if c.r.Context().Err() != nil {
		// A caller gone already (an HTTP/2 stream reset as it opened, a
		// closed connection) is no demand: counted as a request, a
		// rapid-reset flood would keep the API shed for its real callers
		// after it ended.
		return errCallerGone
	}
	if !t.shedsAt(slot, p, s.rule.u) {
		return nil
	}
	c.endFlight(flightFailed) // the calls waiting on this one would be shed alike
	if m := c.e.o.Metrics; m != nil {
		m.RecordShed(c.rt.key, c.rt.api.Pool)
	}
	if c.serveStale() {
		return errEnded
	}
	e := c.refuse(bus.CodeOverloaded, t.msg)
	e.RetryAfter = shedRetryAfter
	return e
}

// noteReply counts a worker's reply for shedding: OVERLOADED (its
// bulkhead refused the call) or any other code, "" included (it took
// the call). Called by reply once the reply is decoded.
func (c *call) noteReply(code bus.Code) {
	s := c.e.shed
	if s.off {
		return
	}
	slot := s.slot(c.started)
	s.of(c.rt).note(slot, code == bus.CodeOverloaded)
	s.tidy(slot)
}

// Shed is the number of calls of the API tier key (registry.API.Key:
// its name, or name@sandbox) this edge has refused by shedding them.
func (e *Edge) Shed(key string) int64 { return e.shed.shedCount(key) }
