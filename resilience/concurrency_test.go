package resilience

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func rlConcurrency(t testing.TB, limit int) *Concurrency {
	t.Helper()
	c, err := NewConcurrency(limit)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestConcurrencyAcquireRelease(t *testing.T) {
	c := rlConcurrency(t, 2)
	p1, ok1 := c.Acquire()
	p2, ok2 := c.Acquire()
	p3, ok3 := c.Acquire()
	if !ok1 || !ok2 || ok3 {
		t.Fatalf("acquire ok = %v %v %v, want true true false", ok1, ok2, ok3)
	}
	if p3 != (Permit{}) {
		t.Fatalf("refused Acquire returned a non-zero permit %+v", p3)
	}
	if n := c.InFlight(); n != 2 {
		t.Fatalf("InFlight = %d, want 2", n)
	}
	p1.Release()
	p1.Release() // idempotent
	copyOfP1 := p1
	copyOfP1.Release() // a copy is the same permit
	p3.Release()       // the zero permit holds nothing
	Permit{}.Release()
	if n := c.InFlight(); n != 1 {
		t.Fatalf("InFlight after releasing p1 (three times) = %d, want 1", n)
	}
	// p1's slot is reused by p4; p1's stale release must not free it.
	p4, ok := c.Acquire()
	if !ok || p4.slot != p1.slot {
		t.Fatalf("expected the freed slot to be reused: %+v %+v", p4, p1)
	}
	p1.Release()
	if n := c.InFlight(); n != 2 {
		t.Fatalf("a stale release freed a slot held by another call: InFlight = %d", n)
	}
	if _, ok := c.Acquire(); ok {
		t.Fatal("admitted a third call")
	}
	p2.Release()
	p4.Release()
	p2.Release()
	p4.Release()
	if n := c.InFlight(); n != 0 {
		t.Fatalf("InFlight = %d, want 0", n)
	}
	if c.Limit() != 2 {
		t.Fatalf("Limit = %d", c.Limit())
	}
}

func TestConcurrencyAsLimiter(t *testing.T) {
	l := rlMust(t, RuleConfig{Behavior: BehaviorConcurrency, Limit: 1})
	d1 := l.Take(rlT0, time.Second)
	d2 := l.Take(rlT0, time.Second)
	if !d1.Allowed || d1.Wait != 0 || d2.Allowed || d2.RetryAfter != 0 {
		t.Fatalf("got %+v, %+v", d1, d2)
	}
	d2.Release() // refused: nothing to release
	if l.Take(rlT0, 0).Allowed {
		t.Fatal("refused decision's Release freed the slot")
	}
	d1.Release()
	d1.Release()
	if !l.Take(rlT0, 0).Allowed {
		t.Fatal("slot not freed by Decision.Release")
	}
	if n := l.(*Concurrency).InFlight(); n != 1 {
		t.Fatalf("InFlight = %d, want 1", n)
	}
}

func TestNewConcurrencyBadLimit(t *testing.T) {
	for _, n := range []int{0, -1, MaxRuleLimit + 1} {
		if _, err := NewConcurrency(n); err == nil {
			t.Errorf("NewConcurrency(%d) accepted", n)
		}
	}
}

// TestConcurrencyUnderRace: many goroutines acquire and release (some
// twice); the count in flight never exceeds the limit nor goes negative.
func TestConcurrencyUnderRace(t *testing.T) {
	const limit, goroutines, rounds = 5, 32, 2000
	c := rlConcurrency(t, limit)
	var inFlight, peak, admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range rounds {
				p, ok := c.Acquire()
				if !ok {
					continue
				}
				admitted.Add(1)
				n := inFlight.Add(1)
				for {
					m := peak.Load()
					if n <= m || peak.CompareAndSwap(m, n) {
						break
					}
				}
				if n > limit {
					t.Errorf("%d in flight, limit %d", n, limit)
				}
				inFlight.Add(-1)
				p.Release()
				if (g+i)%3 == 0 {
					p.Release() // a double release must not free another call's slot
				}
			}
		})
	}
	wg.Wait()
	if n := c.InFlight(); n != 0 {
		t.Fatalf("InFlight = %d after all releases", n)
	}
	if peak.Load() > limit || admitted.Load() == 0 {
		t.Fatalf("peak %d, admitted %d", peak.Load(), admitted.Load())
	}
	t.Logf("admitted %d of %d, peak %d", admitted.Load(), goroutines*rounds, peak.Load())
}

func BenchmarkConcurrency(b *testing.B) {
	c := rlConcurrency(b, 64)
	b.ReportAllocs()
	for b.Loop() {
		p, ok := c.Acquire()
		if !ok {
			b.Fatal("refused")
		}
		p.Release()
	}
}

func BenchmarkConcurrencyParallel(b *testing.B) {
	c := rlConcurrency(b, MaxRuleLimit)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			p, _ := c.Acquire()
			p.Release()
		}
	})
}
