package resilience

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// rlT0 is the fake clock's start; tests only ever pass time values.
var rlT0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func rlAt(d time.Duration) time.Time { return rlT0.Add(d) }

func rlMust(t testing.TB, cfg RuleConfig) Limiter {
	t.Helper()
	l, err := NewLimiter(cfg)
	if err != nil {
		t.Fatalf("NewLimiter(%+v): %v", cfg, err)
	}
	return l
}

// rlBurst makes n calls at one instant and returns how many passed and the
// last refusal.
func rlBurst(l Limiter, now time.Time, n int) (admitted int, last Decision) {
	for range n {
		d := l.Take(now, 0)
		if d.Allowed {
			admitted++
		} else {
			last = d
		}
	}
	return admitted, last
}

func TestRejectBurstAdmitsExactlyLimit(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     RuleConfig
		burstAt time.Duration // after the first call, which opens the window
	}{
		{"1000/s", RuleConfig{Limit: 1000}, 0},
		{"50/s 20 buckets", RuleConfig{Limit: 50, Buckets: 20}, 0},
		{"10/min 60 buckets", RuleConfig{Limit: 10, Window: time.Minute, Buckets: 60}, 0},
		{"3/h", RuleConfig{Limit: 3, Window: time.Hour}, 0},
		{"1/s 1 bucket", RuleConfig{Limit: 1, Buckets: 1}, 0},
		{"100/s burst mid-bucket", RuleConfig{Limit: 100}, 250 * time.Millisecond},
		{"10/min burst late", RuleConfig{Limit: 10, Window: time.Minute, Buckets: 60}, 59*time.Second + 999*time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := rlMust(t, tc.cfg)
			w := tc.cfg.Window
			if w == 0 {
				w = time.Second
			}
			want := tc.cfg.Limit
			if tc.burstAt > 0 {
				l.Take(rlT0, 0) // opens the window; leaves it at w
				want--
			}
			got, last := rlBurst(l, rlAt(tc.burstAt), 3*tc.cfg.Limit)
			if got != want {
				t.Fatalf("burst of %d admitted %d, want %d", 3*tc.cfg.Limit, got, want)
			}
			// The window is full until bucket 0 leaves it, one window
			// after the first call.
			if last.RetryAfter != w-tc.burstAt {
				t.Fatalf("RetryAfter = %v, want %v", last.RetryAfter, w-tc.burstAt)
			}
			if d := l.Take(rlT0.Add(w-1), 0); d.Allowed || d.RetryAfter != 1 {
				t.Fatalf("1ns before the window ends: %+v, want refused with RetryAfter 1ns", d)
			}
			wantNext := tc.cfg.Limit
			if tc.burstAt > 0 {
				wantNext = 1 // only the first call has left the window
			}
			if got, _ := rlBurst(l, rlT0.Add(w), 3*tc.cfg.Limit); got != wantNext {
				t.Fatalf("one window after the first call: admitted %d, want %d", got, wantNext)
			}
		})
	}
}

func TestRejectRetryAfterIsExact(t *testing.T) {
	// 10/s in 10 buckets of 100ms: one call at 0 (bucket 0), nine at
	// 550ms (bucket 5).
	l := rlMust(t, RuleConfig{Limit: 10})
	steps := []struct {
		at         time.Duration
		allowed    bool
		retryAfter time.Duration
	}{
		{0, true, 0},
		{550 * time.Millisecond, true, 0}, // ×9 below
		{600 * time.Millisecond, false, 400 * time.Millisecond}, // bucket 0 leaves at 1s
		{999 * time.Millisecond, false, time.Millisecond},       // still 10 in window
		{time.Second, true, 0},                                  // bucket 0 gone: 9 + this
		{time.Second + 1, false, 500*time.Millisecond - 1},      // bucket 5 leaves at 1.5s
		{1499 * time.Millisecond, false, time.Millisecond},      //
		{1500 * time.Millisecond, true, 0},                      // only bucket 10's call left
		{1500 * time.Millisecond, true, 0},                      //
		{10 * time.Second, true, 0},                             // long idle: empty window
		{10*time.Second + 50*time.Millisecond, true, 0},         //
		{-time.Second, true, 0},                                 // clock stepped back: counts in the newest bucket
		{10*time.Second + 60*time.Millisecond, true, 0},         //
		{10*time.Second + 70*time.Millisecond, true, 0},         //
		{10*time.Second + 80*time.Millisecond, true, 0},         //
		{10*time.Second + 90*time.Millisecond, true, 0},         //
		{10*time.Second + 90*time.Millisecond, true, 0},         //
		{10*time.Second + 90*time.Millisecond, true, 0},         //
		{10*time.Second + 90*time.Millisecond, true, 0},         // 10 in bucket 100
		{10*time.Second + 90*time.Millisecond, false, time.Second - 90*time.Millisecond},
	}
	for i, s := range steps {
		n := 1
		if i == 1 {
			n = 9
		}
		for range n {
			d := l.Take(rlAt(s.at), 0)
			if d.Allowed != s.allowed || d.RetryAfter != s.retryAfter || d.Wait != 0 {
				t.Fatalf("step %d at %v: got %+v, want allowed=%v retryAfter=%v", i, s.at, d, s.allowed, s.retryAfter)
			}
		}
	}
}

func TestRejectEvenlySpreadCallsAtTheLimitAllPass(t *testing.T) {
	for _, tc := range []struct {
		limit   int
		window  time.Duration
		buckets int
		offset  time.Duration
	}{
		{10, time.Second, 10, 0},
		{10, time.Second, 10, 37 * time.Millisecond},
		{7, time.Second, 10, 13 * time.Millisecond}, // spacing not a multiple of the bucket width
		{1000, time.Second, 10, 0},
		{60, time.Minute, 60, 500 * time.Millisecond},
		{3, time.Hour, 12, time.Minute},
	} {
		l := rlMust(t, RuleConfig{Limit: tc.limit, Window: tc.window, Buckets: tc.buckets})
		// The first call opens the window at rlT0; the even calls start
		// at offset.
		if !l.Take(rlT0, 0).Allowed {
			t.Fatal("first call refused")
		}
		gap := tc.window / time.Duration(tc.limit)
		start := tc.window + tc.offset // the first call has left the window
		for i := range 5 * tc.limit {
			at := start + time.Duration(i)*gap
			if d := l.Take(rlAt(at), 0); !d.Allowed {
				t.Fatalf("%d/%v offset %v: call %d at %v refused: %+v", tc.limit, tc.window, tc.offset, i, at, d)
			}
		}
	}
}

// TestRejectSlidingGuarantee checks the documented guarantee on random
// traffic: in every interval of length Window−Window/Buckets at most Limit
// calls pass, and every refusal's RetryAfter is exact.
func TestRejectSlidingGuarantee(t *testing.T) {
	for _, cfg := range []RuleConfig{
		{Limit: 20, Buckets: 10},
		{Limit: 5, Buckets: 4},
		{Limit: 50, Buckets: 60, Window: time.Minute},
		{Limit: 1, Buckets: 1},
	} {
		w := cfg.Window
		if w == 0 {
			w = time.Second
		}
		span := w - w/time.Duration(cfg.Buckets)
		rng := rand.New(rand.NewPCG(1, uint64(cfg.Limit)))
		l := rlMust(t, cfg)
		var admitted []time.Duration
		var at time.Duration
		for range 20000 {
			// Bursty: mostly close together, sometimes long gaps.
			if rng.IntN(10) == 0 {
				at += time.Duration(rng.Int64N(int64(w)))
			} else {
				at += time.Duration(rng.Int64N(int64(w) / int64(cfg.Limit) / 2))
			}
			d := l.Take(rlAt(at), 0)
			if d.Allowed {
				admitted = append(admitted, at)
				continue
			}
			if d.RetryAfter <= 0 || d.RetryAfter > w {
				t.Fatalf("%+v: RetryAfter %v out of (0, %v]", cfg, d.RetryAfter, w)
			}
		}
		for i := range admitted {
			// calls in [admitted[i], admitted[i]+span)
			j, _ := slices.BinarySearch(admitted, admitted[i]+span)
			if j-i > cfg.Limit {
				t.Fatalf("%+v: %d calls passed in [%v, %v+%v), limit %d", cfg, j-i, admitted[i], admitted[i], span, cfg.Limit)
			}
		}
		if len(admitted) < 100 {
			t.Fatalf("%+v: only %d admitted", cfg, len(admitted))
		}
	}
}

// TestRejectRetryAfterAgreesWithTheWindow replays random traffic into two
// identical limiters; at each refusal the second one probes 1ns before and
// at the RetryAfter it was given.
func TestRejectRetryAfterAgreesWithTheWindow(t *testing.T) {
	cfg := RuleConfig{Limit: 8, Buckets: 5}
	rng := rand.New(rand.NewPCG(7, 7))
	var calls []time.Duration
	var at time.Duration
	for range 300 {
		at += time.Duration(rng.Int64N(int64(60 * time.Millisecond)))
		calls = append(calls, at)
	}
	replay := func(n int) Limiter { // a limiter that saw calls[:n]
		l := rlMust(t, cfg)
		for _, c := range calls[:n] {
			l.Take(rlAt(c), 0)
		}
		return l
	}
	l := rlMust(t, cfg)
	checked := 0
	for i, c := range calls {
		d := l.Take(rlAt(c), 0)
		if d.Allowed || i%3 != 0 {
			continue
		}
		checked++
		if before := replay(i).Take(rlAt(c+d.RetryAfter-1), 0); before.Allowed {
			t.Fatalf("call %d at %v: RetryAfter %v, but a call 1ns earlier passes", i, c, d.RetryAfter)
		}
		if after := replay(i).Take(rlAt(c+d.RetryAfter), 0); !after.Allowed {
			t.Fatalf("call %d at %v: RetryAfter %v, but a call then is refused: %+v", i, c, d.RetryAfter, after)
		}
	}
	if checked < 10 {
		t.Fatalf("only %d refusals checked", checked)
	}
}

// guavaCount is the number of calls Guava's SmoothWarmingUp admits in
// [a, b] (seconds after the start) under saturating demand, from cold:
// the interval falls as I(t) = √(c² − βt), β = (c²−s²)/warmUp.
func guavaCount(limit, coldFactor float64, warmUp, a, b float64) float64 {
	s := 1 / limit
	c := coldFactor * s
	beta := (c*c - s*s) / warmUp
	at := func(t float64) float64 { // ∫0^t dt/I
		if t >= warmUp {
			return 2/beta*(c-s) + (t-warmUp)/s
		}
		return 2 / beta * (c - math.Sqrt(c*c-beta*t))
	}
	return at(b) - at(a)
}

func TestWarmUpRamp(t *testing.T) {
	const limit = 100
	l := rlMust(t, RuleConfig{Behavior: BehaviorWarmUp, Limit: limit, ColdFactor: 3, WarmUp: 10 * time.Second})
	// Saturating demand: a call every millisecond.
	perSecond := func(from, to int) []int {
		out := make([]int, to-from)
		for ms := from * 1000; ms < to*1000; ms++ {
			if l.Take(rlAt(time.Duration(ms)*time.Millisecond), 0).Allowed {
				out[ms/1000-from]++
			}
		}
		return out
	}
	got := perSecond(0, 14)
	t.Logf("admitted per second from cold: %v", got)
	guava := func(sec int) float64 { return guavaCount(limit, 3, 10, float64(sec), float64(sec+1)) }
	for sec, n := range got {
		// Guava's count for this second, or for the next one: the ramp
		// runs at most one window ahead.
		lo, hi := guava(sec), guava(sec+1)
		if float64(n) < lo-2 || float64(n) > hi+2 {
			t.Errorf("second %d: admitted %d, Guava's ramp gives %.1f to %.1f", sec, n, lo, hi)
		}
		if sec > 0 && n < got[sec-1] {
			t.Errorf("second %d: admitted %d, fewer than the second before (%d)", sec, n, got[sec-1])
		}
		if sec >= 10 && n != limit {
			t.Errorf("second %d: admitted %d, want %d (warm)", sec, n, limit)
		}
	}
	// The three points of the ramp: a third of the rate at the start,
	// about 1/√5 of it halfway (cold factor 3), all of it at the end.
	if got[0] < 33 || got[0] > 36 || got[5] < 45 || got[5] > 52 || got[10] != limit {
		t.Errorf("ramp start/mid/end = %d/%d/%d, want 33–36 / 45–52 / %d", got[0], got[5], got[10], limit)
	}
	// 2s of idle refill 200 tokens, still below the threshold (500):
	// warm.
	if got := perSecond(16, 17); got[0] != limit {
		t.Errorf("after 2s idle: %d admitted, want %d (still warm)", got[0], limit)
	}
	// A whole warm-up period of idle: cold again.
	if again := perSecond(28, 29); again[0] != got[0] {
		t.Errorf("after 11s idle: %d admitted, want %d (cold)", again[0], got[0])
	}
}

func TestWarmUpLightTrafficStaysColdAndPasses(t *testing.T) {
	// 20/s against 100/s, cold factor 3: below the cold rate (33/s), every
	// call passes and the limiter stays cold.
	cfg := RuleConfig{Behavior: BehaviorWarmUp, Limit: 100}
	cold, _ := rlBurst(rlMust(t, cfg), rlT0, 200)
	l := rlMust(t, cfg)
	for i := range 20 * 30 {
		if d := l.Take(rlAt(time.Duration(i)*50*time.Millisecond), 0); !d.Allowed {
			t.Fatalf("call %d refused: %+v", i, d)
		}
	}
	if got, _ := rlBurst(l, rlAt(31*time.Second), 200); got != cold {
		t.Fatalf("burst after light traffic admitted %d, want %d (cold)", got, cold)
	}
}

func TestWarmUpColdBurst(t *testing.T) {
	for _, cfg := range []RuleConfig{
		{Behavior: BehaviorWarmUp, Limit: 99, ColdFactor: 3},
		{Behavior: BehaviorWarmUp, Limit: 10, ColdFactor: 2},
		{Behavior: BehaviorWarmUp, Limit: 2, ColdFactor: 3}, // never below 1
		{Behavior: BehaviorWarmUp, Limit: 1, ColdFactor: 50},
		{Behavior: BehaviorWarmUp, Limit: 3000},
		{Behavior: BehaviorWarmUp, Limit: 600, Window: time.Minute, Buckets: 60, ColdFactor: 4, WarmUp: 10 * time.Minute},
		// The whole warm-up costs one window: the burst warms it.
		{Behavior: BehaviorWarmUp, Limit: 600, Window: time.Minute, Buckets: 60, ColdFactor: 4, WarmUp: time.Minute},
	} {
		l := rlMust(t, cfg)
		got, last := rlBurst(l, rlT0, 3*cfg.Limit)
		w := cfg.withDefaults()
		// What Guava paces over the first window, continuously.
		want := guavaCount(float64(cfg.Limit)/w.Window.Seconds(), w.ColdFactor, w.WarmUp.Seconds(), 0, w.Window.Seconds())
		if float64(got) < want-1 || float64(got) > want+1 || got < 1 {
			t.Errorf("%+v: cold burst admitted %d, Guava's first window has %.1f", cfg, got, want)
		}
		// At most a window, or a cold token's cost when that is longer.
		if cold := time.Duration(w.ColdFactor * float64(w.Window) / float64(cfg.Limit)); last.RetryAfter <= 0 || last.RetryAfter > max(w.Window, cold) {
			t.Errorf("%+v: RetryAfter %v", cfg, last.RetryAfter)
		}
	}
}

// TestWarmUpRetryAfterIsNeverEarly replays random traffic: no call passes
// before a refusal's RetryAfter, and most pass right at it.
func TestWarmUpRetryAfterIsNeverEarly(t *testing.T) {
	cfg := RuleConfig{Behavior: BehaviorWarmUp, Limit: 20, WarmUp: 5 * time.Second}
	rng := rand.New(rand.NewPCG(3, 3))
	var calls []time.Duration
	var at time.Duration
	for range 400 {
		at += time.Duration(rng.Int64N(int64(40 * time.Millisecond)))
		calls = append(calls, at)
	}
	replay := func(n int) Limiter {
		l := rlMust(t, cfg)
		for _, c := range calls[:n] {
			l.Take(rlAt(c), 0)
		}
		return l
	}
	l := rlMust(t, cfg)
	checked, exact := 0, 0
	for i, c := range calls {
		d := l.Take(rlAt(c), 0)
		if d.Allowed || i%2 != 0 {
			continue
		}
		checked++
		if before := replay(i).Take(rlAt(c+d.RetryAfter-1), 0); before.Allowed {
			t.Fatalf("call %d at %v: RetryAfter %v, but a call 1ns earlier passes", i, c, d.RetryAfter)
		}
		if replay(i).Take(rlAt(c+d.RetryAfter), 0).Allowed {
			exact++
		}
	}
	if checked < 20 || exact < checked*8/10 {
		t.Fatalf("%d refusals checked, %d exact", checked, exact)
	}
	t.Logf("%d refusals checked, %d exact", checked, exact)
}

func TestQueuePacesAndBoundsTheWait(t *testing.T) {
	ms := time.Millisecond
	// 10/s: a slot every 100ms; MaxQueue 500ms.
	l := rlMust(t, RuleConfig{Behavior: BehaviorQueue, Limit: 10, MaxQueue: 500 * ms})
	steps := []struct {
		at, maxWait      time.Duration
		allowed          bool
		wait, retryAfter time.Duration
	}{
		{0, time.Second, true, 0, 0},
		{0, time.Second, true, 100 * ms, 0},
		{0, time.Second, true, 200 * ms, 0},
		{0, 250 * ms, false, 0, 50 * ms}, // the deadline cuts the wait: slot at 300ms
		{0, 0, false, 0, 300 * ms},
		{0, -time.Second, false, 0, 300 * ms}, // negative maxWait = 0
		{0, time.Hour, true, 300 * ms, 0},     // MaxQueue caps maxWait
		{0, time.Hour, true, 400 * ms, 0},
		{0, time.Hour, true, 500 * ms, 0},
		{0, time.Hour, false, 0, 100 * ms}, // 600ms > MaxQueue
		{50 * ms, time.Hour, false, 0, 50 * ms},
		{100 * ms, time.Hour, true, 500 * ms, 0},
		{2 * time.Second, 0, true, 0, 0}, // idle: first call passes at once
		{2 * time.Second, 0, false, 0, 100 * ms},
		{2 * time.Second, time.Hour, true, 100 * ms, 0},
		{2*time.Second + 150*ms, time.Hour, true, 50 * ms, 0},
		{2*time.Second + 250*ms, 0, false, 0, 50 * ms}, // slot at 2.3s
		{2*time.Second + 300*ms, 0, true, 0, 0},
		{5 * time.Second, 0, true, 0, 0}, // idle earns no burst
		{5 * time.Second, 0, false, 0, 100 * ms},
	}
	for i, s := range steps {
		d := l.Take(rlAt(s.at), s.maxWait)
		if d.Allowed != s.allowed || d.Wait != s.wait || d.RetryAfter != s.retryAfter {
			t.Fatalf("step %d (at %v, maxWait %v): got %+v, want allowed=%v wait=%v retryAfter=%v",
				i, s.at, s.maxWait, d, s.allowed, s.wait, s.retryAfter)
		}
	}
}

func TestQueueExactFractionalInterval(t *testing.T) {
	// 3/s: slots at 0, 333333333ns, 666666666ns, exactly 1s, ...; over
	// 3000 calls the drift is zero.
	l := rlMust(t, RuleConfig{Behavior: BehaviorQueue, Limit: 3, MaxQueue: 24 * time.Hour})
	for i := range 3001 {
		d := l.Take(rlT0, 24*time.Hour)
		want := time.Duration(int64(i) * int64(time.Second) / 3)
		if !d.Allowed || d.Wait != want {
			t.Fatalf("call %d: %+v, want wait %v", i, d, want)
		}
	}
}

func TestQueueBurstIsBounded(t *testing.T) {
	// A burst can never queue more than 1 + MaxQueue×rate calls.
	for _, tc := range []struct {
		limit    int
		window   time.Duration
		maxQueue time.Duration
		want     int
	}{
		{100, time.Second, 500 * time.Millisecond, 51},
		{10, time.Second, 50 * time.Millisecond, 1},
		{60, time.Minute, 10 * time.Second, 11},
	} {
		l := rlMust(t, RuleConfig{Behavior: BehaviorQueue, Limit: tc.limit, Window: tc.window, MaxQueue: tc.maxQueue})
		got := 0
		var maxWait time.Duration
		for range 10 * tc.limit {
			if d := l.Take(rlT0, time.Hour); d.Allowed {
				got++
				maxWait = max(maxWait, d.Wait)
			}
		}
		if got != tc.want || maxWait > tc.maxQueue {
			t.Errorf("%d/%v maxQueue %v: admitted %d (longest wait %v), want %d", tc.limit, tc.window, tc.maxQueue, got, maxWait, tc.want)
		}
	}
}

func TestRuleConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  RuleConfig
		errs []string // substrings, one per expected problem; none = valid
	}{
		{"reject defaults", RuleConfig{Limit: 1}, nil},
		{"every behavior", RuleConfig{Behavior: "concurrency", Limit: 5}, nil},
		{"warmup full", RuleConfig{Behavior: "warmup", Limit: 5, Window: time.Minute, Buckets: 60, ColdFactor: 2.5, WarmUp: time.Minute}, nil},
		{"queue full", RuleConfig{Behavior: "queue", Limit: 5, Window: time.Hour, MaxQueue: time.Second}, nil},
		{"keyed", RuleConfig{Limit: 5, MaxKeys: 3, Exceptions: map[string]int{"a": 0, "b": 100}}, nil},
		{"no limit", RuleConfig{}, []string{"limit: 0 is not in [1, 1073741824]"}},
		{"bad behavior", RuleConfig{Behavior: "drop", Limit: 1, ColdFactor: 2},
			[]string{`behavior: "drop" is not one of reject, warmup, queue, concurrency`}},
		{"window too short", RuleConfig{Limit: 1, Window: time.Microsecond}, []string{"window: 1µs is not in [1ms, 24h0m0s]"}},
		{"window too long", RuleConfig{Limit: 1, Window: 25 * time.Hour}, []string{"window: 25h0m0s is not in"}},
		{"negative window", RuleConfig{Limit: 1, Window: -time.Second}, []string{"window: -1s"}},
		{"buckets", RuleConfig{Limit: 1, Buckets: 1001}, []string{"buckets: 1001 is not in [1, 1000]"}},
		{"buckets split", RuleConfig{Limit: 1, Buckets: 7}, []string{"buckets: window 1s does not split into 7 buckets"}},
		{"everything wrong", RuleConfig{Behavior: "warmup", Limit: -1, Window: time.Nanosecond, Buckets: -2, ColdFactor: 1, WarmUp: -time.Second, MaxQueue: time.Second, MaxKeys: -1, Exceptions: map[string]int{"x": -5}},
			[]string{"limit: -1", "window: 1ns", "buckets: -2", "cold_factor: 1 is not in (1, 100]", "warm_up: -1s", `max_queue: not used by behavior "warmup"`, "max_keys: -1", `exceptions: limit -5 of "x"`}},
		{"NaN cold factor", RuleConfig{Behavior: "warmup", Limit: 1, ColdFactor: math.NaN()}, []string{"cold_factor: NaN"}},
		{"fields of other behaviours", RuleConfig{Behavior: "concurrency", Limit: 1, Window: time.Second, Buckets: 10, ColdFactor: 3, WarmUp: time.Second, MaxQueue: time.Second},
			[]string{"window: not used", "buckets: not used", "cold_factor: not used", "warm_up: not used", "max_queue: not used"}},
		{"queue buckets", RuleConfig{Behavior: "queue", Limit: 1, Buckets: 10, MaxQueue: -1}, []string{"buckets: not used", "max_queue: -1ns is not in"}},
		{"too many keys", RuleConfig{Limit: 1, MaxKeys: MaxRuleKeys + 1}, []string{"max_keys: 16777217"}},
		{"huge limit", RuleConfig{Limit: MaxRuleLimit + 1, Exceptions: map[string]int{"y": MaxRuleLimit + 1}}, []string{"limit: 1073741825", "exceptions: limit 1073741825"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if len(tc.errs) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				if _, err := NewKeyed(tc.cfg); err != nil {
					t.Fatalf("NewKeyed: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate accepted %+v", tc.cfg)
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tc.errs) {
				t.Errorf("got %d problems, want %d:\n%v", len(lines), len(tc.errs), err)
			}
			for _, want := range tc.errs {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error lacks %q:\n%v", want, err)
				}
			}
			if _, err2 := NewLimiter(tc.cfg); err2 == nil {
				t.Error("NewLimiter accepted it")
			}
			if _, err2 := NewKeyed(tc.cfg); err2 == nil || err2.Error() != err.Error() {
				t.Errorf("NewKeyed: %v, want the Validate error", err2)
			}
		})
	}
}

func TestNewLimiterBuildsEachBehaviour(t *testing.T) {
	for _, tc := range []struct {
		behavior string
		want     string
	}{
		{"", "*resilience.RejectLimiter"},
		{BehaviorReject, "*resilience.RejectLimiter"},
		{BehaviorWarmUp, "*resilience.WarmUpLimiter"},
		{BehaviorQueue, "*resilience.QueueLimiter"},
		{BehaviorConcurrency, "*resilience.Concurrency"},
	} {
		l := rlMust(t, RuleConfig{Behavior: tc.behavior, Limit: 2})
		if got := fmt.Sprintf("%T", l); got != tc.want {
			t.Errorf("behavior %q: got %s, want %s", tc.behavior, got, tc.want)
		}
	}
	// Keyed fields are refused by NewLimiter, with the other problems.
	_, err := NewLimiter(RuleConfig{Limit: 0, MaxKeys: 5, Exceptions: map[string]int{"a": 1}})
	if err == nil || !strings.Contains(err.Error(), "limit: 0") || !strings.Contains(err.Error(), "only for keyed limiters") {
		t.Fatalf("NewLimiter with keyed fields: %v", err)
	}
}

func TestDecisionReleaseOfRateLimitsIsANoOp(t *testing.T) {
	l := rlMust(t, RuleConfig{Limit: 1})
	d := l.Take(rlT0, 0)
	d.Release()
	d.Release()
	if l.Take(rlT0, 0).Allowed {
		t.Fatal("Release gave back a rate-limit call")
	}
	Decision{}.Release()
}

// TestRateLimitersUnderRace hammers each behaviour from many goroutines
// at a few instants and checks the totals (run with -race).
func TestRateLimitersUnderRace(t *testing.T) {
	const goroutines, calls = 16, 500
	for _, tc := range []struct {
		cfg  RuleConfig
		want int // admitted, exactly
	}{
		{RuleConfig{Limit: 1000}, 1000},
		{RuleConfig{Behavior: BehaviorWarmUp, Limit: 3000}, 1023}, // as TestWarmUpColdBurst
		{RuleConfig{Behavior: BehaviorQueue, Limit: 100, MaxQueue: time.Second}, 101},
	} {
		l := rlMust(t, tc.cfg)
		var (
			mu    sync.Mutex
			waits []time.Duration
			wg    sync.WaitGroup
		)
		for range goroutines {
			wg.Go(func() {
				var mine []time.Duration
				for range calls {
					if d := l.Take(rlT0, time.Second); d.Allowed {
						mine = append(mine, d.Wait)
					}
				}
				mu.Lock()
				waits = append(waits, mine...)
				mu.Unlock()
			})
		}
		wg.Wait()
		if len(waits) != tc.want {
			t.Errorf("%+v: %d admitted by %d goroutines, want %d", tc.cfg, len(waits), goroutines, tc.want)
		}
		if tc.cfg.Behavior == BehaviorQueue { // distinct slots
			slices.Sort(waits)
			for i, w := range waits {
				if w != time.Duration(i)*10*time.Millisecond {
					t.Fatalf("queue slot %d: wait %v, want %v", i, w, time.Duration(i)*10*time.Millisecond)
				}
			}
		}
	}
}

func BenchmarkReject(b *testing.B) {
	l := rlMust(b, RuleConfig{Limit: MaxRuleLimit})
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		if !l.Take(rlAt(time.Duration(i)*time.Microsecond), 0).Allowed {
			b.Fatal("refused")
		}
	}
}

func BenchmarkRejectRefused(b *testing.B) {
	l := rlMust(b, RuleConfig{Limit: 10})
	rlBurst(l, rlT0, 10)
	b.ReportAllocs()
	for b.Loop() {
		if l.Take(rlT0, 0).Allowed {
			b.Fatal("admitted")
		}
	}
}

func BenchmarkRejectParallel(b *testing.B) {
	l := rlMust(b, RuleConfig{Limit: MaxRuleLimit})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l.Take(rlT0, 0)
		}
	})
}

func BenchmarkWarmUp(b *testing.B) {
	l := rlMust(b, RuleConfig{Behavior: BehaviorWarmUp, Limit: MaxRuleLimit})
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		l.Take(rlAt(time.Duration(i)*time.Microsecond), 0)
	}
}

func BenchmarkQueue(b *testing.B) {
	l := rlMust(b, RuleConfig{Behavior: BehaviorQueue, Limit: 1000000})
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		if !l.Take(rlAt(time.Duration(i)*time.Microsecond), 0).Allowed {
			b.Fatal("refused")
		}
	}
}
