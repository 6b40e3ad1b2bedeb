package resilience

import (
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
)

func mustBudget(t testing.TB, cfg RetryBudgetConfig) *RetryBudget {
	t.Helper()
	b, err := NewRetryBudget(cfg)
	if err != nil {
		t.Fatalf("NewRetryBudget(%+v): %v", cfg, err)
	}
	return b
}

// retries counts how many of n retries at now the budget grants.
func retries(b *RetryBudget, now time.Time, n int) int {
	k := 0
	for range n {
		if b.TryRetry(now) {
			k++
		}
	}
	return k
}

func TestRetryBudgetRatioAndFloor(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cfg      RetryBudgetConfig
		requests int
		want     int // retries granted of 1000 asked, all at one instant
	}{
		{"10% of 100 requests, no floor", RetryBudgetConfig{MinPerSecond: -1}, 100, 10},
		{"10% of 99 requests, no floor", RetryBudgetConfig{MinPerSecond: -1}, 99, 9},
		{"10% of 30 requests is exactly 3", RetryBudgetConfig{MinPerSecond: -1}, 30, 3},
		{"no requests, no floor", RetryBudgetConfig{MinPerSecond: -1}, 0, 0},
		{"no requests, default floor 1/s over 10s", RetryBudgetConfig{}, 0, 10},
		{"floor adds to the ratio", RetryBudgetConfig{}, 100, 20},
		{"20% and 0.5/s over 4s", RetryBudgetConfig{Ratio: 0.2, MinPerSecond: 0.5, Window: 4 * time.Second}, 50, 12},
		{"ratio 1", RetryBudgetConfig{Ratio: 1, MinPerSecond: -1}, 7, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := mustBudget(t, tc.cfg)
			for range tc.requests {
				b.Deposit(brT0)
			}
			if got := retries(b, brT0, 1000); got != tc.want {
				t.Fatalf("granted %d, want %d", got, tc.want)
			}
		})
	}
}

func TestRetryBudgetWindowSlides(t *testing.T) {
	b := mustBudget(t, RetryBudgetConfig{MinPerSecond: -1, Window: 10 * time.Second})
	for range 100 {
		b.Deposit(brT0)
	}
	if got := retries(b, brT0.Add(9*time.Second), 100); got != 10 {
		t.Fatalf("inside the window: %d retries, want 10", got)
	}
	// At 10s the first bucket (requests and retries) leaves the window.
	for range 50 {
		b.Deposit(brT0.Add(10 * time.Second))
	}
	// The 10 retries at 9s still count against 50 requests: no room.
	if got := retries(b, brT0.Add(10*time.Second), 100); got != 0 {
		t.Fatalf("at 10s: %d retries, want 0", got)
	}
	// At 19s the retries of 9s are gone too: 5 of the 50.
	if got := retries(b, brT0.Add(19*time.Second), 100); got != 5 {
		t.Fatalf("at 19s: %d retries, want 5", got)
	}
	// Old deposits (recorded late) outside the window are dropped.
	b.Deposit(brT0)
	if got := retries(b, brT0.Add(19*time.Second), 100); got != 0 {
		t.Fatalf("a stale deposit made room for %d retries", got)
	}
	// A retry asked with a time older than the window is refused.
	if b.TryRetry(brT0) {
		t.Fatal("stale TryRetry granted")
	}
}

// TestRetryBudgetStorm: a backend that fails every call, callers that retry
// each call up to 3 times. Over every window, retries never exceed
// ratio×requests + floor, and the budget is actually used.
func TestRetryBudgetStorm(t *testing.T) {
	const (
		ratio   = 0.1
		floorPS = 1.0
		window  = 10 * time.Second
		bucket  = window / 10
	)
	for _, rps := range []int{0, 1, 5, 50, 1000} {
		b := mustBudget(t, RetryBudgetConfig{Ratio: ratio, MinPerSecond: floorPS, Window: window})
		const secs = 60
		reqs := make([]int, secs*10) // per bucket
		rets := make([]int, secs*10)
		for tick := range secs * 10 { // one bucket at a time
			n := rps / 10
			if rps%10 != 0 && tick%(10/(rps%10)) == 0 {
				n++
			}
			for i := range n {
				now := brT0.Add(time.Duration(tick)*bucket + time.Duration(i)*bucket/time.Duration(n+1))
				b.Deposit(now)
				reqs[tick]++
				for range 3 {
					if !b.TryRetry(now) {
						break
					}
					rets[tick]++
				}
			}
			// Low traffic still retries: a lone failing call asks for one.
			if n == 0 && b.TryRetry(brT0.Add(time.Duration(tick)*bucket)) {
				rets[tick]++
			}
		}
		var total, totalReqs int
		for end := range reqs {
			var r, q int
			for k := max(0, end-9); k <= end; k++ {
				r += rets[k]
				q += reqs[k]
			}
			if limit := ratio*float64(q) + floorPS*window.Seconds(); float64(r) > limit+1e-9 {
				t.Fatalf("rps %d: window ending in bucket %d has %d retries for %d requests (limit %.1f)", rps, end, r, q, limit)
			}
			total += rets[end]
			totalReqs += reqs[end]
		}
		// Over 60s the budget grants nearly all it may: 10% + 1/s.
		if allowed := ratio*float64(totalReqs) + floorPS*secs; float64(total) < 0.9*allowed {
			t.Fatalf("rps %d: only %d retries granted of %.0f allowed", rps, total, allowed)
		}
	}
}

func TestRetryBudgetConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  RetryBudgetConfig
		want []string
	}{
		{RetryBudgetConfig{Ratio: -0.1}, []string{"ratio: -0.1 is not in (0, 1]"}},
		{RetryBudgetConfig{Ratio: 1.1, MinPerSecond: math.NaN(), Window: time.Millisecond},
			[]string{"ratio: 1.1", "min_per_second: NaN", "window: 1ms is shorter than 100ms"}},
		{RetryBudgetConfig{Ratio: math.NaN(), MinPerSecond: math.Inf(1), Window: 48 * time.Hour},
			[]string{"ratio: NaN", "min_per_second: +Inf", "window: 48h0m0s is longer than 24h0m0s"}},
		{RetryBudgetConfig{Window: -time.Second}, []string{"window: -1s is negative"}},
	} {
		b, err := NewRetryBudget(tc.cfg)
		if err == nil || b != nil {
			t.Fatalf("NewRetryBudget(%+v) accepted", tc.cfg)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q lacks %q", err, w)
			}
		}
		var joined interface{ Unwrap() []error }
		if !errors.As(err, &joined) || len(joined.Unwrap()) != len(tc.want) {
			t.Errorf("want %d joined errors, got %q", len(tc.want), err)
		}
	}
	got := mustBudget(t, RetryBudgetConfig{}).Config()
	if want := (RetryBudgetConfig{Ratio: 0.1, MinPerSecond: 1, Window: 10 * time.Second}); got != want {
		t.Fatalf("defaults %+v, want %+v", got, want)
	}
}

func TestRetryBudgetConcurrent(t *testing.T) {
	b := mustBudget(t, RetryBudgetConfig{MinPerSecond: -1})
	var wg sync.WaitGroup
	var mu sync.Mutex
	granted := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			for range 1000 {
				b.Deposit(brT0)
				if b.TryRetry(brT0) {
					n++
				}
			}
			mu.Lock()
			granted += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	if granted > 800 {
		t.Fatalf("%d retries for 8000 requests at 10%%", granted)
	}
}

func TestBackoff(t *testing.T) {
	const ms = time.Millisecond
	for _, tc := range []struct {
		name          string
		attempt       int
		base, maxWait time.Duration
		r             uint64
		want          time.Duration
	}{
		{"r=0 waits nothing", 1, 100 * ms, time.Second, 0, 0},
		{"r=max waits the ceiling", 1, 100 * ms, time.Second, math.MaxUint64, 100 * ms},
		{"r=half waits half", 1, 100 * ms, time.Second, 1 << 63, 50 * ms},
		{"attempt 2 doubles", 2, 100 * ms, time.Second, math.MaxUint64, 200 * ms},
		{"attempt 3 quadruples", 3, 100 * ms, time.Second, math.MaxUint64, 400 * ms},
		{"attempt 3, half", 3, 100 * ms, time.Second, 1 << 63, 200 * ms},
		{"capped", 5, 100 * ms, time.Second, math.MaxUint64, time.Second},
		{"capped, half", 5, 100 * ms, time.Second, 1 << 63, 500 * ms},
		{"huge attempt does not overflow", 1000, 100 * ms, time.Second, math.MaxUint64, time.Second},
		{"attempt 0 counts as 1", 0, 100 * ms, time.Second, math.MaxUint64, 100 * ms},
		{"negative attempt counts as 1", -3, 100 * ms, time.Second, math.MaxUint64, 100 * ms},
		{"max below base", 1, 100 * ms, 30 * ms, math.MaxUint64, 30 * ms},
		{"no cap", 11, 100 * ms, 0, math.MaxUint64, 1024 * 100 * ms},
		{"no cap, huge attempt saturates", 200, time.Second, 0, math.MaxUint64, math.MaxInt64},
		{"zero base", 3, 0, time.Second, math.MaxUint64, 0},
		{"negative base", 3, -ms, time.Second, math.MaxUint64, 0},
	} {
		if got := Backoff(tc.attempt, tc.base, tc.maxWait, tc.r); got != tc.want {
			t.Errorf("%s: Backoff(%d, %v, %v, %#x) = %v, want %v", tc.name, tc.attempt, tc.base, tc.maxWait, tc.r, got, tc.want)
		}
	}
	// Bounds over many random inputs (a fixed xorshift sequence).
	x := uint64(88172645463325252)
	for i := range 100000 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		attempt := i%12 + 1
		ceiling := min(time.Second, 10*ms<<(attempt-1))
		if got := Backoff(attempt, 10*ms, time.Second, x); got < 0 || got > ceiling {
			t.Fatalf("Backoff(%d, 10ms, 1s, %#x) = %v, outside [0, %v]", attempt, x, got, ceiling)
		}
	}
}

func TestAttemptTimeout(t *testing.T) {
	const ms = time.Millisecond
	for _, tc := range []struct {
		name                      string
		remaining, backend, floor time.Duration
		want                      time.Duration
		ok                        bool
	}{
		{"backend timeout is shorter", 5 * time.Second, time.Second, 50 * ms, time.Second, true},
		{"remaining is shorter", 800 * ms, time.Second, 50 * ms, 800 * ms, true},
		{"equal", time.Second, time.Second, 50 * ms, time.Second, true},
		{"remaining at the floor", 50 * ms, time.Second, 50 * ms, 50 * ms, true},
		{"remaining below the floor", 49 * ms, time.Second, 50 * ms, 0, false},
		{"no backend timeout", 3 * time.Second, 0, 50 * ms, 3 * time.Second, true},
		{"no floor", ms, time.Second, 0, ms, true},
		{"deadline passed", 0, time.Second, 0, 0, false},
		{"deadline long passed", -time.Second, time.Second, 50 * ms, 0, false},
	} {
		got, ok := AttemptTimeout(tc.remaining, tc.backend, tc.floor)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: AttemptTimeout(%v, %v, %v) = %v, %v; want %v, %v",
				tc.name, tc.remaining, tc.backend, tc.floor, got, ok, tc.want, tc.ok)
		}
	}
}

func BenchmarkRetryBudget(b *testing.B) {
	rb := mustBudget(b, RetryBudgetConfig{})
	now := brT0
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		now = now.Add(time.Microsecond)
		rb.Deposit(now)
		if i%4 == 0 {
			rb.TryRetry(now)
		}
	}
}
