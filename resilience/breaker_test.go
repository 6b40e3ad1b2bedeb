package resilience

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var brT0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func mustBreaker(t testing.TB, cfg BreakerConfig) *Breaker {
	t.Helper()
	b, err := NewBreaker(cfg)
	if err != nil {
		t.Fatalf("NewBreaker(%+v): %v", cfg, err)
	}
	return b
}

// brCall makes one call through b at now; it fails the test if b refuses.
func brCall(t testing.TB, b *Breaker, now time.Time, latency time.Duration, failed bool) (Transition, bool) {
	t.Helper()
	tk := b.Allow(now)
	if !tk.OK {
		t.Fatalf("Allow at %v refused (%v), state %v", now.Sub(brT0), tk.Refusal, b.State(now))
	}
	return b.Record(tk, now, latency, failed)
}

// brTrip opens a breaker configured with consecutive failures at now.
func brTrip(t testing.TB, b *Breaker, now time.Time) Transition {
	t.Helper()
	for i := 0; ; i++ {
		if tr, ok := brCall(t, b, now, time.Millisecond, true); ok {
			return tr
		}
		if i > 1000 {
			t.Fatal("breaker does not trip")
		}
	}
}

// brClose drives an open breaker through half-open to closed at now (which
// must be past its open period) and returns the close transition.
func brClose(t testing.TB, b *Breaker, now time.Time) Transition {
	t.Helper()
	var tks []Ticket
	for range b.Config().HalfOpenProbes {
		tk := b.Allow(now)
		if !tk.OK {
			t.Fatalf("probe refused: %v (state %v)", tk.Refusal, b.State(now))
		}
		tks = append(tks, tk)
	}
	for i, tk := range tks {
		tr, ok := b.Record(tk, now, time.Millisecond, false)
		if ok != (i == len(tks)-1) {
			t.Fatalf("probe %d: changed = %v", i, ok)
		}
		if ok {
			return tr
		}
	}
	return Transition{}
}

type brOutcome struct {
	lat    time.Duration
	failed bool
}

var (
	okCall   = brOutcome{time.Millisecond, false}
	failCall = brOutcome{time.Millisecond, true}
)

func brRep(n int, o ...brOutcome) []brOutcome {
	var out []brOutcome
	for range n {
		out = append(out, o...)
	}
	return out
}

func brSeq(parts ...[]brOutcome) []brOutcome {
	var out []brOutcome
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func TestBreakerTripsAtThreshold(t *testing.T) {
	slow := func(ms int) brOutcome { return brOutcome{time.Duration(ms) * time.Millisecond, false} }
	slowFail := brOutcome{80 * time.Millisecond, true}
	for _, tc := range []struct {
		name   string
		cfg    BreakerConfig
		calls  []brOutcome // all at brT0, 1ms apart
		tripAt int         // index of the call that trips; -1 for none
		reason string
	}{
		{"default is 3 consecutive failures", BreakerConfig{},
			brRep(3, failCall), 2, "3 consecutive failures"},
		{"default: a success resets the count", BreakerConfig{},
			brSeq(brRep(2, failCall), []brOutcome{okCall}, brRep(2, failCall)), -1, ""},
		{"5 consecutive failures", BreakerConfig{ConsecutiveFailures: 5},
			brSeq(brRep(4, failCall), []brOutcome{okCall}, brRep(5, failCall)), 9, "5 consecutive failures"},
		{"slow calls do not count as failures", BreakerConfig{ConsecutiveFailures: 2},
			brRep(5, slow(900)), -1, ""},
		{"3 consecutive slow calls", BreakerConfig{ConsecutiveSlow: 3, SlowCall: 50 * time.Millisecond},
			brSeq(brRep(2, slow(51)), []brOutcome{slow(50)}, brRep(2, slow(51)), []brOutcome{slowFail}), 5,
			"3 consecutive slow calls (> 50ms)"},
		{"latency at the threshold is not slow", BreakerConfig{ConsecutiveSlow: 3, SlowCall: 50 * time.Millisecond},
			brRep(10, slow(50)), -1, ""},
		{"fast failures do not count as slow", BreakerConfig{ConsecutiveSlow: 2, SlowCall: 50 * time.Millisecond},
			brRep(10, failCall), -1, ""},
		{"failure ratio waits for min calls", BreakerConfig{FailureRatio: 0.5, MinCalls: 10},
			brRep(10, failCall), 9, "failure ratio 1.00 ≥ 0.50 over 10s (10 calls)"},
		{"failure ratio trips when equal", BreakerConfig{FailureRatio: 0.5, MinCalls: 10},
			brRep(5, okCall, failCall), 9, "failure ratio 0.50 ≥ 0.50 over 10s (10 calls)"},
		{"failure ratio just below", BreakerConfig{FailureRatio: 0.5, MinCalls: 10},
			brSeq([]brOutcome{okCall, okCall}, brRep(4, okCall, failCall), brRep(20, okCall, okCall, failCall)), -1, ""},
		{"failure ratio 0.62 over 26 calls", BreakerConfig{FailureRatio: 0.6, MinCalls: 26},
			brSeq(brRep(10, okCall), brRep(16, failCall)), 25, "failure ratio 0.62 ≥ 0.60 over 10s (26 calls)"},
		{"failure ratio 0.1 is exact: 3 of 30", BreakerConfig{FailureRatio: 0.1, MinCalls: 30},
			brSeq(brRep(27, okCall), brRep(3, failCall)), 29, "failure ratio 0.10 ≥ 0.10 over 10s (30 calls)"},
		{"failure ratio turns consecutive failures off", BreakerConfig{FailureRatio: 0.9, MinCalls: 20},
			brSeq(brRep(10, okCall), brRep(9, failCall)), -1, ""},
		{"both: consecutive failures first", BreakerConfig{ConsecutiveFailures: 4, FailureRatio: 0.5, MinCalls: 100},
			brRep(4, failCall), 3, "4 consecutive failures"},
		{"slow ratio", BreakerConfig{SlowRatio: 0.5, MinCalls: 4, SlowCall: 50 * time.Millisecond},
			brSeq([]brOutcome{okCall, slow(60), okCall}, []brOutcome{slowFail}), 3,
			"slow-call ratio 0.50 ≥ 0.50 over 10s (4 calls, slow > 50ms)"},
		{"slow ratio waits for min calls", BreakerConfig{SlowRatio: 0.5, MinCalls: 8, SlowCall: 50 * time.Millisecond},
			brSeq(brRep(7, slow(60)), []brOutcome{okCall}), 7, "slow-call ratio 0.88 ≥ 0.50 over 10s (8 calls, slow > 50ms)"},
		{"slow ratio ignores failures", BreakerConfig{SlowRatio: 0.5, MinCalls: 4, SlowCall: 50 * time.Millisecond},
			brRep(20, failCall), -1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := mustBreaker(t, tc.cfg)
			now := brT0
			for i, o := range tc.calls {
				now = now.Add(time.Millisecond)
				tr, changed := brCall(t, b, now, o.lat, o.failed)
				if changed != (i == tc.tripAt) {
					t.Fatalf("call %d: changed = %v (%q), want trip at %d", i, changed, tr.Reason, tc.tripAt)
				}
				if !changed {
					continue
				}
				want := Transition{From: StateClosed, To: StateOpen, Reason: tc.reason, At: now,
					OpenFor: DefaultBreakerOpenFor, OpenUntil: now.Add(DefaultBreakerOpenFor), Gen: 1}
				if tr != want {
					t.Fatalf("transition\n got %+v\nwant %+v", tr, want)
				}
				if s := b.State(now); s != StateOpen {
					t.Fatalf("state %v after trip", s)
				}
				return
			}
			if s := b.State(now); s != StateClosed {
				t.Fatalf("state %v, want closed", s)
			}
		})
	}
}

func TestBreakerWindowSlides(t *testing.T) {
	cfg := BreakerConfig{FailureRatio: 0.5, MinCalls: 10, Window: 10 * time.Second}
	for _, tc := range []struct {
		name  string
		later time.Duration // when the second half of the calls comes
		trips bool
	}{
		{"all in the window", 9999 * time.Millisecond, true},
		{"first bucket expired", 10 * time.Second, false},
		{"long idle", time.Hour, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := mustBreaker(t, cfg)
			for range 5 {
				brCall(t, b, brT0, time.Millisecond, true)
			}
			// Five successes later: 5 of 10 failCall if the first five still count.
			var tripped bool
			for range 5 {
				_, ch := brCall(t, b, brT0.Add(tc.later), time.Millisecond, false)
				tripped = tripped || ch
			}
			if tripped != tc.trips {
				t.Fatalf("tripped = %v, want %v", tripped, tc.trips)
			}
		})
	}

	// Calls recorded late, with a time older than the window, do not count;
	// ones inside it do.
	b := mustBreaker(t, BreakerConfig{FailureRatio: 0.5, MinCalls: 4})
	now := brT0.Add(time.Minute)
	brCall(t, b, now, time.Millisecond, false)
	for range 3 {
		if _, ch := brCall(t, b, now.Add(-11*time.Second), time.Millisecond, true); ch {
			t.Fatal("a call older than the window counted")
		}
	}
	brCall(t, b, now.Add(-5*time.Second), time.Millisecond, true)
	brCall(t, b, now.Add(-9*time.Second), time.Millisecond, true)
	if _, ch := brCall(t, b, now, time.Millisecond, true); !ch {
		t.Fatal("3 failures of 4 inside the window did not trip at min calls 4")
	}
}

func TestBreakerOpenRefusesWithRetryAfter(t *testing.T) {
	b := mustBreaker(t, BreakerConfig{OpenFor: 4 * time.Second})
	tr := brTrip(t, b, brT0)
	for _, tc := range []struct {
		at    time.Duration
		state State
		retry time.Duration
	}{
		{0, StateOpen, 4 * time.Second},
		{1500 * time.Millisecond, StateOpen, 2500 * time.Millisecond},
		{4*time.Second - 1, StateOpen, 1},
		{4 * time.Second, StateHalfOpen, 0},
	} {
		now := brT0.Add(tc.at)
		if s := b.State(now); s != tc.state {
			t.Fatalf("at %v: state %v, want %v", tc.at, s, tc.state)
		}
		if tc.state != StateOpen {
			continue
		}
		tk := b.Allow(now)
		if tk.OK || tk.Refusal != RefusedOpen || tk.RetryAfter != tc.retry {
			t.Fatalf("at %v: ticket %+v, want refused open, retry after %v", tc.at, tk, tc.retry)
		}
		if _, ch := b.Record(tk, now, 0, true); ch {
			t.Fatal("recording a refused ticket changed the state")
		}
	}
	if tr.OpenUntil != brT0.Add(4*time.Second) {
		t.Fatalf("OpenUntil %v", tr.OpenUntil)
	}
}

func TestBreakerHalfOpenProbes(t *testing.T) {
	for _, probes := range []int{1, 2, 5} {
		b := mustBreaker(t, BreakerConfig{HalfOpenProbes: probes, OpenFor: time.Second})
		brTrip(t, b, brT0)
		now := brT0.Add(time.Second)
		var tks []Ticket
		for range probes {
			tk := b.Allow(now)
			if !tk.OK {
				t.Fatalf("probes=%d: probe %d refused", probes, len(tks))
			}
			tks = append(tks, tk)
		}
		for range 3 {
			if tk := b.Allow(now); tk.OK || tk.Refusal != RefusedProbing || tk.RetryAfter != time.Second {
				t.Fatalf("probes=%d: extra call got %+v", probes, tk)
			}
		}
		// Successes short of all probes keep it half-open and the slots taken.
		for i, tk := range tks[:probes-1] {
			if _, ch := b.Record(tk, now, time.Millisecond, false); ch {
				t.Fatalf("probes=%d: probe %d closed it early", probes, i)
			}
			if b.Allow(now).OK {
				t.Fatalf("probes=%d: a recorded probe freed a slot", probes)
			}
		}
		tr, ch := b.Record(tks[probes-1], now, time.Millisecond, false)
		want := Transition{From: StateHalfOpen, To: StateClosed, At: now, OpenFor: time.Second, Gen: 2,
			Reason: fmt.Sprintf("%d of %d probes succeeded", probes, probes)}
		if !ch || tr != want {
			t.Fatalf("probes=%d: close\n got %+v %v\nwant %+v", probes, tr, ch, want)
		}
		if s := b.State(now); s != StateClosed {
			t.Fatalf("state %v", s)
		}
	}
}

func TestBreakerCancelFreesProbe(t *testing.T) {
	b := mustBreaker(t, BreakerConfig{HalfOpenProbes: 1, OpenFor: time.Second})
	brTrip(t, b, brT0)
	now := brT0.Add(time.Second)
	tk := b.Allow(now)
	if !tk.OK || b.Allow(now).OK {
		t.Fatal("want exactly one probe")
	}
	b.Cancel(tk)
	b.Cancel(tk) // a second cancel must not free a slot that is not taken
	tk2 := b.Allow(now)
	if !tk2.OK {
		t.Fatal("cancel did not free the probe slot")
	}
	if b.Allow(now).OK {
		t.Fatal("double cancel freed two slots")
	}
	if _, ch := b.Record(tk2, now, time.Millisecond, false); !ch || b.State(now) != StateClosed {
		t.Fatal("the new probe did not close the breaker")
	}
	b.Cancel(Ticket{})                    // no-op
	b.Cancel(b.Allow(now.Add(time.Hour))) // closed ticket: no-op
	if b.State(now.Add(time.Hour)) != StateClosed {
		t.Fatal("cancel changed state")
	}
}

func TestBreakerDoublingCapAndReset(t *testing.T) {
	b := mustBreaker(t, BreakerConfig{OpenFor: time.Second, MaxOpenFor: 5 * time.Second, HalfOpenProbes: 2})
	tr := brTrip(t, b, brT0)
	var now time.Time
	var gen uint64 = 1
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second} {
		if tr.OpenFor != want || tr.Gen != gen {
			t.Fatalf("round %d: OpenFor %v gen %d, want %v gen %d", i, tr.OpenFor, tr.Gen, want, gen)
		}
		// Still open one nanosecond before the end.
		if s := b.State(tr.OpenUntil.Add(-1)); s != StateOpen {
			t.Fatalf("round %d: state %v before OpenUntil", i, s)
		}
		now = tr.OpenUntil
		p1, p2 := b.Allow(now), b.Allow(now)
		if !p1.OK || !p2.OK {
			t.Fatalf("round %d: probes refused", i)
		}
		// First probe succeeds, second fails: open again, doubled.
		if _, ch := b.Record(p1, now, time.Millisecond, false); ch {
			t.Fatal("one probe of two closed it")
		}
		var ch bool
		tr, ch = b.Record(p2, now.Add(time.Millisecond), time.Millisecond, true)
		gen++
		if !ch || tr.From != StateHalfOpen || tr.To != StateOpen || tr.Reason != "probe failed" {
			t.Fatalf("round %d: failed probe gave %+v %v", i, tr, ch)
		}
	}
	// Close; the next trip starts over from OpenFor.
	cl := brClose(t, b, tr.OpenUntil)
	if cl.OpenFor != time.Second {
		t.Fatalf("close transition OpenFor %v, want 1s", cl.OpenFor)
	}
	tr = brTrip(t, b, tr.OpenUntil.Add(time.Minute))
	if tr.OpenFor != time.Second || tr.From != StateClosed {
		t.Fatalf("after close: %+v", tr)
	}
}

func TestBreakerSlowProbe(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cfg    BreakerConfig
		reopen bool
	}{
		{"slow strategy on", BreakerConfig{ConsecutiveFailures: 3, ConsecutiveSlow: 5, SlowCall: 50 * time.Millisecond, HalfOpenProbes: 1}, true},
		{"slow ratio on", BreakerConfig{ConsecutiveFailures: 3, SlowRatio: 0.9, SlowCall: 50 * time.Millisecond, HalfOpenProbes: 1}, true},
		{"slow strategies off", BreakerConfig{ConsecutiveFailures: 3, SlowCall: 50 * time.Millisecond, HalfOpenProbes: 1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := mustBreaker(t, tc.cfg)
			tr := brTrip(t, b, brT0)
			now := tr.OpenUntil
			tr, ch := brCall(t, b, now, 51*time.Millisecond, false)
			if !ch {
				t.Fatal("no transition")
			}
			if tc.reopen {
				if tr.To != StateOpen || tr.Reason != "slow probe (51ms > 50ms)" || tr.OpenFor != 2*DefaultBreakerOpenFor {
					t.Fatalf("got %+v", tr)
				}
			} else if tr.To != StateClosed {
				t.Fatalf("got %+v", tr)
			}
		})
	}
}

// brAdmitted counts how many of n calls at now the breaker admits.
func brAdmitted(b *Breaker, now time.Time, n int) int {
	k := 0
	for range n {
		if tk := b.Allow(now); tk.OK {
			k++
		} else if tk.Refusal != RefusedSlowStart || tk.RetryAfter <= 0 || tk.RetryAfter > time.Second {
			panic("unexpected refusal")
		}
	}
	return k
}

func TestBreakerSlowStart(t *testing.T) {
	cfg := BreakerConfig{OpenFor: time.Second, HalfOpenProbes: 1, SlowStart: 10 * time.Second, SlowStartFrom: 0.1}
	for _, tc := range []struct {
		name  string
		at    time.Duration
		calls int
		want  int
	}{
		{"0% of the ramp", 0, 100, 10},
		{"25% of the ramp", 2500 * time.Millisecond, 1000, 325},
		{"50% of the ramp", 5 * time.Second, 100, 55},
		{"50% of the ramp, 7 calls", 5 * time.Second, 7, 3},
		{"just before the end", 10*time.Second - time.Millisecond, 100, 99},
		{"100% of the ramp", 10 * time.Second, 100, 100},
		{"after the ramp", time.Minute, 1000, 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := mustBreaker(t, cfg)
			tr := brTrip(t, b, brT0)
			cl := brClose(t, b, tr.OpenUntil)
			if got := brAdmitted(b, cl.At.Add(tc.at), tc.calls); got != tc.want {
				t.Fatalf("admitted %d of %d, want %d", got, tc.calls, tc.want)
			}
		})
	}

	// Off: full traffic at once after a close.
	b := mustBreaker(t, BreakerConfig{OpenFor: time.Second, HalfOpenProbes: 1, SlowStart: -1})
	cl := brClose(t, b, brTrip(t, b, brT0).OpenUntil)
	if got := brAdmitted(b, cl.At, 100); got != 100 {
		t.Fatalf("slow start off: admitted %d of 100", got)
	}
	// A fresh breaker does not ramp.
	if got := brAdmitted(mustBreaker(t, cfg), brT0, 100); got != 100 {
		t.Fatalf("new breaker admitted %d of 100", got)
	}
	// A call admitted during the ramp still counts toward tripping.
	b = mustBreaker(t, cfg)
	cl = brClose(t, b, brTrip(t, b, brT0).OpenUntil)
	now := cl.At.Add(9 * time.Second) // share 0.91
	var trips int
	for range 30 {
		if tk := b.Allow(now); tk.OK {
			if _, ch := b.Record(tk, now, time.Millisecond, true); ch {
				trips++
			}
		}
	}
	if trips != 1 || b.State(now) != StateOpen {
		t.Fatalf("failures during slow start: %d trips, state %v", trips, b.State(now))
	}
}

func TestBreakerStaleTicketsIgnored(t *testing.T) {
	b := mustBreaker(t, BreakerConfig{ConsecutiveFailures: 2, HalfOpenProbes: 1, OpenFor: time.Second})
	old := b.Allow(brT0) // a slow call started while closed
	tr := brTrip(t, b, brT0)
	// It ends while open: ignored.
	if _, ch := b.Record(old, brT0.Add(time.Millisecond), time.Millisecond, true); ch {
		t.Fatal("old ticket changed an open breaker")
	}
	// Half-open: a probe is out; the old call's success neither closes the
	// breaker nor frees the probe's slot.
	now := tr.OpenUntil
	probe := b.Allow(now)
	if _, ch := b.Record(old, now, time.Millisecond, false); ch {
		t.Fatal("old ticket counted as a probe")
	}
	if b.Allow(now).OK {
		t.Fatal("old ticket freed a probe slot")
	}
	if _, ch := b.Record(probe, now, time.Millisecond, false); !ch {
		t.Fatal("probe did not close")
	}
	// Closed again: an old failure does not count toward the 2 consecutive.
	now = now.Add(time.Minute) // past slow start
	brCall(t, b, now, time.Millisecond, true)
	if _, ch := b.Record(old, now, time.Millisecond, true); ch {
		t.Fatal("old ticket tripped")
	}
	if _, ch := brCall(t, b, now, time.Millisecond, true); !ch {
		t.Fatal("two fresh failures did not trip")
	}
}

func TestBreakerApply(t *testing.T) {
	cfg := BreakerConfig{OpenFor: time.Second, MaxOpenFor: time.Minute, HalfOpenProbes: 1, SlowStart: 10 * time.Second}
	remoteOpen := func(at time.Duration, gen uint64, openFor time.Duration) Transition {
		return Transition{From: StateClosed, To: StateOpen, Reason: "5 consecutive failures", At: brT0.Add(at),
			OpenFor: openFor, OpenUntil: brT0.Add(at + openFor), Gen: gen}
	}
	remoteClose := func(at time.Duration, gen uint64) Transition {
		return Transition{From: StateHalfOpen, To: StateClosed, Reason: "1 of 1 probes succeeded", At: brT0.Add(at),
			OpenFor: time.Second, Gen: gen}
	}

	t.Run("remote open", func(t *testing.T) {
		b := mustBreaker(t, cfg)
		now := brT0.Add(100 * time.Millisecond) // the message arrives a little later
		if !b.Apply(remoteOpen(0, 1, 4*time.Second), now) {
			t.Fatal("not applied")
		}
		tk := b.Allow(now)
		if tk.OK || tk.Refusal != RefusedOpen || tk.RetryAfter != 3900*time.Millisecond {
			t.Fatalf("ticket %+v, want open until the remote's OpenUntil", tk)
		}
		for _, tr := range []Transition{remoteOpen(0, 1, 4*time.Second), remoteOpen(0, 0, 4*time.Second)} {
			if b.Apply(tr, now) {
				t.Fatalf("repeated or stale %+v applied", tr)
			}
		}
		if s := b.State(brT0.Add(4 * time.Second)); s != StateHalfOpen {
			t.Fatalf("state at remote OpenUntil: %v", s)
		}
		// The doubling continues from the remote's period.
		tr, _ := brCall(t, b, brT0.Add(4*time.Second), 0, true)
		if tr.OpenFor != 8*time.Second || tr.Gen != 2 {
			t.Fatalf("reopen after remote open: %+v", tr)
		}
	})

	// A transition off the network may be forged: it can never open the
	// breaker for longer than the policy's max_open_for, hold a slow
	// start by claiming a future time, or push Gen to the end of the clock.
	t.Run("forged transitions are bounded by the policy", func(t *testing.T) {
		b := mustBreaker(t, cfg)
		now := brT0
		forged := Transition{To: StateOpen, At: now, OpenFor: 24 * time.Hour, OpenUntil: now.Add(time.Hour), Gen: 1000}
		if !b.Apply(forged, now) {
			t.Fatal("not applied")
		}
		if tk := b.Allow(now); tk.OK || tk.RetryAfter != time.Minute {
			t.Fatalf("ticket %+v: open for more than max_open_for (1m)", tk)
		}
		if s := b.State(now.Add(time.Minute)); s != StateHalfOpen {
			t.Fatalf("state after max_open_for: %v", s)
		}
		// The next own trip doubles from max_open_for at most.
		if tr, _ := brCall(t, b, now.Add(time.Minute), 0, true); tr.OpenFor != time.Minute || tr.Gen != 1001 {
			t.Fatalf("reopen: %+v", tr)
		}

		b = mustBreaker(t, cfg)
		future := Transition{To: StateOpen, At: now.Add(24 * time.Hour), OpenFor: time.Second, OpenUntil: now.Add(24*time.Hour + time.Second), Gen: 1}
		if !b.Apply(future, now) {
			t.Fatal("not applied")
		}
		if s := b.State(now.Add(time.Minute)); s != StateHalfOpen {
			t.Fatalf("a future At kept the breaker open: %v", s)
		}

		b = mustBreaker(t, cfg)
		ramp := Transition{To: StateClosed, At: now.Add(365 * 24 * time.Hour), Gen: 1}
		if !b.Apply(ramp, now) {
			t.Fatal("not applied")
		}
		if got := brAdmitted(b, now.Add(time.Minute), 100); got != 100 {
			t.Fatalf("a future At held slow start: %d of 100 admitted a minute later", got)
		}

		b = mustBreaker(t, cfg)
		if b.Apply(Transition{To: StateOpen, At: now, OpenFor: time.Second, Gen: math.MaxUint64}, now) {
			t.Fatal("gen jump to the end of the clock applied")
		}
		if !b.Apply(Transition{To: StateOpen, At: now, OpenFor: time.Second, Gen: MaxGenJump}, now) {
			t.Fatal("a gen within MaxGenJump refused (a fresh worker joining an old pool)")
		}
	})

	t.Run("remote open already over", func(t *testing.T) {
		b := mustBreaker(t, cfg)
		if !b.Apply(remoteOpen(0, 1, time.Second), brT0.Add(2*time.Second)) {
			t.Fatal("not applied")
		}
		if s := b.State(brT0.Add(2 * time.Second)); s != StateHalfOpen {
			t.Fatalf("state %v", s)
		}
	})

	t.Run("remote close", func(t *testing.T) {
		b := mustBreaker(t, cfg)
		own := brTrip(t, b, brT0) // gen 1
		if !b.Apply(remoteClose(2*time.Second, 2), brT0.Add(2*time.Second)) {
			t.Fatal("not applied")
		}
		if b.Apply(remoteClose(2*time.Second, 2), brT0.Add(3*time.Second)) {
			t.Fatal("repeated close applied")
		}
		if b.Apply(own, brT0.Add(3*time.Second)) {
			t.Fatal("stale open applied")
		}
		// Closed, ramping from the remote's At: 55% at 5s into the ramp.
		if got := brAdmitted(b, brT0.Add(7*time.Second), 100); got != 55 {
			t.Fatalf("admitted %d of 100 halfway through the ramp", got)
		}
		// The next trip starts from OpenFor again, and supersedes gen 2.
		tr := brTrip(t, b, brT0.Add(time.Minute))
		if tr.OpenFor != time.Second || tr.Gen != 3 {
			t.Fatalf("trip after remote close: %+v", tr)
		}
	})

	t.Run("own transitions echoed back", func(t *testing.T) {
		b := mustBreaker(t, cfg)
		tr := brTrip(t, b, brT0)
		if b.Apply(tr, brT0.Add(time.Millisecond)) {
			t.Fatal("own open applied")
		}
		cl := brClose(t, b, tr.OpenUntil)
		if b.Apply(cl, cl.At) || b.Apply(tr, cl.At) {
			t.Fatal("own transitions applied")
		}
		if s := b.State(cl.At); s != StateClosed {
			t.Fatalf("state %v", s)
		}
	})

	t.Run("concurrent transitions: the later wins on both", func(t *testing.T) {
		a, b := mustBreaker(t, cfg), mustBreaker(t, cfg)
		// Both open at gen 1 (a first); each applies the other's: b's is later.
		ta := brTrip(t, a, brT0)
		tb := brTrip(t, b, brT0.Add(10*time.Millisecond))
		if a.Apply(tb, brT0.Add(20*time.Millisecond)) != true || b.Apply(ta, brT0.Add(20*time.Millisecond)) {
			t.Fatal("tie not broken by At")
		}
		// Now both are open until tb.OpenUntil.
		if ka, kb := a.Allow(brT0.Add(time.Second)), b.Allow(brT0.Add(time.Second)); ka.RetryAfter != kb.RetryAfter {
			t.Fatalf("a and b disagree: %v vs %v", ka.RetryAfter, kb.RetryAfter)
		}
		// b reopens (gen 2) while a closes (gen 2) a little later.
		now := tb.OpenUntil
		rb, _ := brCall(t, b, now, 0, true)
		ra := brClose(t, a, now.Add(5*time.Millisecond))
		if rb.Gen != 2 || ra.Gen != 2 {
			t.Fatalf("gens %d %d", rb.Gen, ra.Gen)
		}
		if !b.Apply(ra, now.Add(10*time.Millisecond)) || a.Apply(rb, now.Add(10*time.Millisecond)) {
			t.Fatal("later close did not win")
		}
		if a.State(now.Add(time.Second)) != StateClosed || b.State(now.Add(time.Second)) != StateClosed {
			t.Fatal("a and b disagree")
		}
	})

	t.Run("voids outstanding tickets", func(t *testing.T) {
		b := mustBreaker(t, BreakerConfig{ConsecutiveFailures: 1, HalfOpenProbes: 1, SlowStart: -1})
		old := b.Allow(brT0)
		b.Apply(remoteOpen(0, 1, time.Second), brT0)
		b.Apply(remoteClose(2*time.Second, 2), brT0.Add(2*time.Second))
		if _, ch := b.Record(old, brT0.Add(2*time.Second), 0, true); ch {
			t.Fatal("a call admitted before Apply counted")
		}
		probeTime := brT0.Add(time.Minute)
		tr, _ := brCall(t, b, probeTime, 0, true) // a fresh call still trips
		if tr.To != StateOpen || tr.Gen != 3 {
			t.Fatalf("got %+v", tr)
		}
	})

	t.Run("half-open and unknown transitions are not shared", func(t *testing.T) {
		b := mustBreaker(t, cfg)
		for _, tr := range []Transition{
			{From: StateOpen, To: StateHalfOpen, At: brT0, Gen: 9},
			{From: StateOpen, To: State(7), At: brT0, Gen: 9},
		} {
			if b.Apply(tr, brT0) {
				t.Fatalf("%+v applied", tr)
			}
		}
		if b.State(brT0) != StateClosed {
			t.Fatal("state changed")
		}
	})

	t.Run("open with zero OpenFor and OpenUntil uses the config", func(t *testing.T) {
		b := mustBreaker(t, cfg)
		b.Apply(Transition{To: StateOpen, At: brT0, Gen: 1}, brT0)
		if tk := b.Allow(brT0); tk.RetryAfter != time.Second {
			t.Fatalf("retry after %v", tk.RetryAfter)
		}
	})
}

func TestBreakerConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  BreakerConfig
		want []string
	}{
		{"negative counts", BreakerConfig{ConsecutiveFailures: -1, ConsecutiveSlow: -2, SlowCall: time.Second, MinCalls: -3, HalfOpenProbes: -4},
			[]string{"consecutive_failures: -1 is negative", "consecutive_slow: -2", "min_calls: -3", "half_open_probes: -4"}},
		{"ratios out of range", BreakerConfig{FailureRatio: 1.5, SlowRatio: -0.1, SlowCall: time.Second, SlowStartFrom: 2},
			[]string{"failure_ratio: 1.5 is not in (0, 1]", "slow_ratio: -0.1", "slow_start_from: 2"}},
		{"slow strategies need slow_call", BreakerConfig{ConsecutiveSlow: 3},
			[]string{"slow_call: required by consecutive_slow and slow_ratio"}},
		{"slow ratio needs slow_call", BreakerConfig{SlowRatio: 0.5},
			[]string{"slow_call: required"}},
		{"negative slow_call", BreakerConfig{SlowCall: -time.Second}, []string{"slow_call: -1s is negative"}},
		{"window too short", BreakerConfig{Window: 50 * time.Millisecond}, []string{"window: 50ms is shorter than 100ms"}},
		{"negative window", BreakerConfig{Window: -time.Second}, []string{"window: -1s is negative"}},
		{"negative open_for", BreakerConfig{OpenFor: -time.Second, MaxOpenFor: -time.Second},
			[]string{"open_for: -1s is negative", "max_open_for: -1s is negative"}},
		{"max below open", BreakerConfig{OpenFor: 10 * time.Second, MaxOpenFor: 5 * time.Second},
			[]string{"max_open_for: 5s is shorter than open_for 10s"}},
		{"max below default open", BreakerConfig{MaxOpenFor: 2 * time.Second},
			[]string{"max_open_for: 2s is shorter than open_for 5s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := NewBreaker(tc.cfg)
			if err == nil || b != nil {
				t.Fatalf("NewBreaker(%+v) = %v, nil error", tc.cfg, b)
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
		})
	}
}

func TestBreakerDefaults(t *testing.T) {
	b := mustBreaker(t, BreakerConfig{})
	want := BreakerConfig{ConsecutiveFailures: 3, Window: 10 * time.Second, MinCalls: 20, OpenFor: 5 * time.Second,
		MaxOpenFor: time.Minute, HalfOpenProbes: 3, SlowStart: 10 * time.Second, SlowStartFrom: 0.1}
	if got := b.Config(); got != want {
		t.Fatalf("defaults\n got %+v\nwant %+v", got, want)
	}
	// MaxOpenFor follows a long OpenFor.
	if got := mustBreaker(t, BreakerConfig{OpenFor: 2 * time.Minute}).Config().MaxOpenFor; got != 2*time.Minute {
		t.Fatalf("MaxOpenFor %v", got)
	}
	// A ratio strategy alone does not add consecutive failures.
	if got := mustBreaker(t, BreakerConfig{FailureRatio: 0.5}).Config().ConsecutiveFailures; got != 0 {
		t.Fatalf("ConsecutiveFailures %d", got)
	}
}

func TestStateText(t *testing.T) {
	for s, want := range map[State]string{StateClosed: "closed", StateOpen: "open", StateHalfOpen: "half-open"} {
		if s.String() != want {
			t.Errorf("%d.String() = %q", s, s.String())
		}
		txt, err := s.MarshalText()
		var back State
		if err != nil || back.UnmarshalText(txt) != nil || back != s {
			t.Errorf("%v: text round trip gave %v, %v", s, back, err)
		}
	}
	if Refusal(9).String() != "Refusal(9)" {
		t.Error(Refusal(9).String())
	}
	if State(9).String() != "State(9)" {
		t.Error(State(9).String())
	}
	if _, err := State(9).MarshalText(); err == nil {
		t.Error("State(9) marshalled")
	}
	var s State
	if err := s.UnmarshalText([]byte("ajar")); err == nil {
		t.Error("ajar parsed")
	}
	for r, want := range map[Refusal]string{NotRefused: "", RefusedOpen: "circuit open",
		RefusedProbing: "circuit half-open, probes in flight", RefusedSlowStart: "circuit closed recently, ramping up"} {
		if r.String() != want {
			t.Errorf("Refusal %d: %q", r, r.String())
		}
	}
}

// TestBreakerConcurrent runs Allow and Record from many goroutines (run with
// -race) and checks that half-open never has more probes out than allowed.
func TestBreakerConcurrent(t *testing.T) {
	const probes = 2
	b := mustBreaker(t, BreakerConfig{ConsecutiveFailures: 3, FailureRatio: 0.5, MinCalls: 10, ConsecutiveSlow: 4,
		SlowCall: 5 * time.Millisecond, OpenFor: time.Millisecond, MaxOpenFor: 8 * time.Millisecond,
		HalfOpenProbes: probes, SlowStart: 5 * time.Millisecond})
	var clock atomic.Int64 // fake nanoseconds since brT0, shared by all goroutines
	var transitions atomic.Int64
	var mu sync.Mutex
	probesPerPeriod := map[uint64]int{} // half-open epoch → probes admitted
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 5000 {
				now := brT0.Add(time.Duration(clock.Add(int64(10 * time.Microsecond))))
				tk := b.Allow(now)
				if !tk.OK {
					continue
				}
				if tk.probe {
					mu.Lock()
					probesPerPeriod[tk.epoch]++
					mu.Unlock()
				}
				failed := (i+g)%5 < 2 || (i/500)%2 == 1
				lat := time.Duration(i%7) * time.Millisecond
				if i%50 == 0 && !tk.probe {
					b.Cancel(tk)
					continue
				}
				if _, ch := b.Record(tk, brT0.Add(time.Duration(clock.Load())), lat, failed); ch {
					transitions.Add(1)
				}
				_ = b.State(now)
			}
		}()
	}
	wg.Wait()
	for epoch, n := range probesPerPeriod {
		if n > probes {
			t.Fatalf("half-open period %d admitted %d probes, limit %d", epoch, n, probes)
		}
	}
	if len(probesPerPeriod) == 0 {
		t.Fatal("never half-open: the test exercised nothing")
	}
	if transitions.Load() == 0 {
		t.Fatal("no transitions: the test exercised nothing")
	}
}

func BenchmarkBreakerAllowRecord(b *testing.B) {
	for _, bc := range []struct {
		name string
		cfg  BreakerConfig
	}{
		{"consecutive", BreakerConfig{}},
		{"all-strategies", BreakerConfig{ConsecutiveFailures: 5, ConsecutiveSlow: 5, SlowCall: 50 * time.Millisecond,
			FailureRatio: 0.5, SlowRatio: 0.5, MinCalls: 20}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			br := mustBreaker(b, bc.cfg)
			now := brT0
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				now = now.Add(time.Microsecond)
				tk := br.Allow(now)
				br.Record(tk, now, time.Millisecond, i%8 == 0)
			}
		})
	}
	b.Run("parallel", func(b *testing.B) {
		br := mustBreaker(b, BreakerConfig{FailureRatio: 0.5, MinCalls: 20})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			now := brT0
			for i := 0; pb.Next(); i++ {
				now = now.Add(time.Microsecond)
				tk := br.Allow(now)
				br.Record(tk, now, time.Millisecond, i%8 == 0)
			}
		})
	})
}
