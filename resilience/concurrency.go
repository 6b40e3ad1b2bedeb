package resilience

import (
	"fmt"
	"sync"
	"time"
)

// Concurrency caps the calls in flight: at most Limit at once (a bulkhead
// per API or per app). A call acquires a Permit and releases it when it
// ends. The count never goes negative and never exceeds Limit, whatever the
// callers do: releasing a permit twice (or a copy of it) frees its slot
// once, and releasing the zero Permit does nothing. Safe for concurrent
// use; Acquire and Release take a short mutex and, once the limiter has
// seen its peak concurrency, do not allocate.
//
// Each admitted call holds a numbered slot with a generation count; a
// permit names its slot and generation, so a stale permit cannot free a
// slot that a later call holds.
type Concurrency struct {
	mu       sync.Mutex
	limit    int
	inFlight int
	gens     []uint64 // per slot; odd while held
	free     []int32  // slots not held
}

// NewConcurrency returns a limiter of limit calls in flight. It returns an
// error if limit is not in [1, MaxRuleLimit].
func NewConcurrency(limit int) (*Concurrency, error) {
	if limit < 1 || limit > MaxRuleLimit {
		return nil, fmt.Errorf("limit: %d is not in [1, %d]", limit, MaxRuleLimit)
	}
	return newConcurrency(limit), nil
}

func newConcurrency(limit int) *Concurrency { return &Concurrency{limit: limit} }

// Acquire takes a slot if fewer than Limit calls are in flight. It returns
// the permit to release when the call ends, and false (with a zero Permit)
// when the limit is reached. It never blocks.
func (c *Concurrency) Acquire() (Permit, bool) {
	c.mu.Lock()
	p, ok := c.acquireLocked()
	c.mu.Unlock()
	return p, ok
}

func (c *Concurrency) acquireLocked() (Permit, bool) {
	if c.inFlight >= c.limit {
		return Permit{}, false
	}
	var slot int32
	if n := len(c.free); n > 0 {
		slot = c.free[n-1]
		c.free = c.free[:n-1]
	} else {
		slot = int32(len(c.gens))
		c.gens = append(c.gens, 0)
	}
	c.gens[slot]++
	c.inFlight++
	return Permit{c: c, slot: slot, gen: c.gens[slot]}, true
}

// Take is Acquire as a Limiter: an admitted Decision carries the permit
// (Decision.Release frees it); a refused one has RetryAfter 0 (unknown:
// it depends on when calls end). now and maxWait are ignored: a
// concurrency limit never queues.
func (c *Concurrency) Take(_ time.Time, _ time.Duration) Decision {
	p, ok := c.Acquire()
	return Decision{Allowed: ok, permit: p}
}

func (c *Concurrency) takeKeyed(now time.Time, maxWait time.Duration) Decision {
	// The permit is released without the Keyed's lock, so the state stays
	// under c.mu even here.
	return c.Take(now, maxWait)
}

// reset sets a new limit for a new key value. The generations stay, so that
// permits of the previous value, already released, stay dead.
func (c *Concurrency) reset(limit int) bool {
	c.mu.Lock()
	c.limit = limit
	c.mu.Unlock()
	return true
}

func (c *Concurrency) busy() bool { return c.InFlight() > 0 }

// InFlight returns the number of calls holding a permit.
func (c *Concurrency) InFlight() int {
	c.mu.Lock()
	n := c.inFlight
	c.mu.Unlock()
	return n
}

// Limit returns the most calls admitted in flight.
func (c *Concurrency) Limit() int {
	c.mu.Lock()
	n := c.limit
	c.mu.Unlock()
	return n
}

// Permit is a concurrency slot held by one call; see Concurrency. Its zero
// value holds nothing.
type Permit struct {
	c    *Concurrency
	slot int32
	gen  uint64
}

// Release frees the permit's slot. It is idempotent: only the first
// Release of a permit (or of any copy of it) counts. The zero Permit's
// Release does nothing.
func (p Permit) Release() {
	c := p.c
	if c == nil {
		return
	}
	c.mu.Lock()
	if c.gens[p.slot] == p.gen {
		c.gens[p.slot]++
		c.free = append(c.free, p.slot)
		c.inFlight--
	}
	c.mu.Unlock()
}
