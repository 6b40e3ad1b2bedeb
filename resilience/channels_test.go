package resilience

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// chT0 is the start of the channel timelines, on a whole second.
var chT0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// chSim is a timeline of one API's channels: a fake clock, the counts the
// workers' reports fill as calls happen, and the states the controller
// stores between its steps.
type chSim struct {
	t         *testing.T
	p         ChannelPolicy // defaults applied
	specs     []ChannelSpec
	states    []ChannelStatus
	overrides map[string]ChannelState
	counts    *ChannelCounts
	now       time.Time
	rnd       uint64
	trans     []ChannelTransition // of the last step
}

// newChSim starts a timeline at chT0 with no stored state.
func newChSim(t *testing.T, p ChannelPolicy, specs ...ChannelSpec) *chSim {
	p = p.WithDefaults()
	return &chSim{t: t, p: p, specs: specs, counts: NewChannelCounts(p.Window + 5*time.Second),
		now: chT0, overrides: map[string]ChannelState{}}
}

// chNames are channels that serve no scenario in particular (all the same
// one).
func chNames(names ...string) []ChannelSpec {
	specs := make([]ChannelSpec, len(names))
	for i, n := range names {
		specs[i] = ChannelSpec{Name: n}
	}
	return specs
}

// wait moves the clock on by d.
func (s *chSim) wait(d time.Duration) { s.now = s.now.Add(d) }

// calls counts n calls of channel at now, failed of them failed.
func (s *chSim) calls(channel string, n, failed int) {
	s.counts.Add(channel, s.now, ChannelWindow{Calls: n, Failures: failed,
		LatencySum: time.Duration(n) * time.Millisecond, LatencyMax: time.Millisecond})
}

// probes counts n probe calls of channel at now, failed of them failed.
func (s *chSim) probes(channel string, n, failed int) {
	s.counts.Add(channel, s.now, ChannelWindow{Calls: n, Failures: failed, Probes: n, ProbeFailures: failed})
}

// step runs the controller at now, keeps what it returns and checks the
// invariants every step must keep.
func (s *chSim) step() []ChannelTransition {
	s.t.Helper()
	s.rnd++
	observed := func(channel string, since time.Time) ChannelWindow { return s.counts.Sum(channel, since, s.now) }
	s.states, s.trans = StepChannels(s.p, s.specs, s.states, s.overrides, observed, s.now, s.rnd)
	chCheckStep(s.t, s.specs, s.states, s.trans, s.now)
	return s.trans
}

// chCheckStep checks what one step returned: a state per spec in order,
// shares that match the states, overrides in force, and transitions of
// this step, none of which took the last available channel of a scenario
// out.
func chCheckStep(t *testing.T, specs []ChannelSpec, states []ChannelStatus, trans []ChannelTransition, now time.Time) {
	t.Helper()
	if len(states) != len(specs) {
		t.Fatalf("%d states for %d specs", len(states), len(specs))
	}
	for i, st := range states {
		if st.Name != specs[i].Name {
			t.Fatalf("state %d is %q, spec %q", i, st.Name, specs[i].Name)
		}
		var shareOK bool
		switch st.State {
		case ChannelAvailable:
			shareOK = st.Share == 1 && st.Fails == 0
		case ChannelCut, ChannelProbing:
			shareOK = st.Share == 0
		case ChannelRamping:
			shareOK = st.Share > 0 && st.Share < 1
		}
		if !shareOK {
			t.Fatalf("%s: state %s with share %v, fails %d", st.Name, st.State, st.Share, st.Fails)
		}
		if st.Manual != "" && st.Manual != st.State {
			t.Fatalf("%s: state %s under a manual %s", st.Name, st.State, st.Manual)
		}
		if want := st.State == ChannelCut && st.Manual == ""; st.ProbeAt.IsZero() == want {
			t.Fatalf("%s: state %s (manual %q) with ProbeAt %v", st.Name, st.State, st.Manual, st.ProbeAt)
		}
	}
	for _, tr := range trans {
		if !tr.At.Equal(now) || (tr.By != byController && tr.By != byManual) || tr.Reason == "" ||
			(tr.From == tr.To && tr.To != ChannelRamping) {
			t.Fatalf("bad transition %+v at %v", tr, now)
		}
		if tr.By != byController || tr.From != ChannelAvailable || tr.To != ChannelCut {
			continue
		}
		i := slices.IndexFunc(specs, func(sp ChannelSpec) bool { return sp.Name == tr.Channel })
		if !slices.ContainsFunc(serves(specs[i]), func(sc string) bool { return chAvailableFor(specs, states, i, sc) }) {
			t.Fatalf("%s was cut with no other channel available: %+v", tr.Channel, states)
		}
	}
}

// chAvailableFor reports whether a channel other than i is available for
// scenario sc.
func chAvailableFor(specs []ChannelSpec, states []ChannelStatus, i int, sc string) bool {
	for j, st := range states {
		if j != i && st.State == ChannelAvailable && slices.Contains(serves(specs[j]), sc) {
			return true
		}
	}
	return false
}

// state returns channel's current state.
func (s *chSim) state(channel string) ChannelStatus {
	s.t.Helper()
	for _, st := range s.states {
		if st.Name == channel {
			return st
		}
	}
	s.t.Fatalf("no state for %s in %+v", channel, s.states)
	return ChannelStatus{}
}

// want checks channel's state, share and n.
func (s *chSim) want(channel string, state ChannelState, share float64, fails int) {
	s.t.Helper()
	st := s.state(channel)
	if st.State != state || st.Share != share || st.Fails != fails {
		s.t.Fatalf("at +%v %s is %s, share %v, fails %d (%s); want %s, share %v, fails %d",
			s.now.Sub(chT0), channel, st.State, st.Share, st.Fails, st.Reason, state, share, fails)
	}
}

// wantCut checks that channel is cut by the controller with n = fails,
// for Base·2^fails capped at MaxCut, ±10% of jitter.
func (s *chSim) wantCut(channel string, fails int) {
	s.t.Helper()
	s.want(channel, ChannelCut, 0, fails)
	st := s.state(channel)
	length := min(s.p.Base<<fails, s.p.MaxCut)
	if got := st.ProbeAt.Sub(st.Since); got < length*9/10 || got > length*11/10 {
		s.t.Fatalf("%s cut for %v, want %v ±10%%", channel, got, length)
	}
}

// wantTrans checks the last step's transitions, written "channel
// from>to by".
func (s *chSim) wantTrans(want ...string) {
	s.t.Helper()
	got := make([]string, len(s.trans))
	for i, tr := range s.trans {
		got[i] = fmt.Sprintf("%s %s>%s %s", tr.Channel, tr.From, tr.To, tr.By)
	}
	if !slices.Equal(got, want) {
		s.t.Fatalf("at +%v transitions %q, want %q", s.now.Sub(chT0), got, want)
	}
}

// probeAt moves the clock to channel's ProbeAt and checks that it starts
// probing there and not a nanosecond before.
func (s *chSim) probeAt(channel string) {
	s.t.Helper()
	st := s.state(channel)
	s.now = st.ProbeAt.Add(-time.Nanosecond)
	s.step()
	s.wantTrans()
	s.want(channel, ChannelCut, 0, st.Fails)
	s.wait(time.Nanosecond)
	s.step()
	s.wantTrans(channel + " cut>probing controller")
	s.want(channel, ChannelProbing, 0, st.Fails)
	if got := s.state(channel); got.Round != st.Round+1 || !got.Since.Equal(s.now) {
		s.t.Fatalf("%s probing round %d since %v, want round %d since %v", channel, got.Round, got.Since, st.Round+1, s.now)
	}
}

// probeRound runs a probe round of channel from its ProbeAt: n probes, failed
// of them failed, reported a second after the round began and judged a
// second later.
func (s *chSim) probeRound(channel string, n, failed int) {
	s.t.Helper()
	s.probeAt(channel)
	s.wait(time.Second)
	s.probes(channel, n, failed)
	s.wait(time.Second)
	s.step()
}

// rampStep feeds ramping channel n calls, failed of them failed, a second
// into its step, and steps when the step has lasted a window.
func (s *chSim) rampStep(channel string, n, failed int) {
	s.t.Helper()
	since := s.state(channel).Since
	s.now = since.Add(time.Second)
	s.calls(channel, n, failed)
	s.now = since.Add(s.p.Window)
	s.step()
}

// rampUp takes ramping channel to available with healthy steps, checking
// each doubling.
func (s *chSim) rampUp(channel string) {
	s.t.Helper()
	st := s.state(channel)
	for share := st.Share * 2; ; share *= 2 {
		s.rampStep(channel, 20, 0)
		if share >= 1 {
			s.wantTrans(channel + " ramping>available controller")
			s.want(channel, ChannelAvailable, 1, 0)
			return
		}
		s.wantTrans(channel + " ramping>ramping controller")
		s.want(channel, ChannelRamping, share, st.Fails)
	}
}

func TestChannelPolicyWithDefaults(t *testing.T) {
	defaults := ChannelPolicy{Threshold: 0.9, Window: 10 * time.Second, MinVolume: 20, Base: 5 * time.Minute,
		MaxCut: time.Hour, Jitter: 0.1, Probes: 5, RampStart: 1.0 / 16}
	custom := ChannelPolicy{Threshold: 0.5, Window: time.Minute, MinVolume: 3, Base: time.Second,
		MaxCut: time.Minute, Jitter: 0.3, Probes: 2, RampStart: 0.5}
	for _, tc := range []struct {
		name   string
		in     ChannelPolicy
		want   ChannelPolicy
		change func(*ChannelPolicy)
	}{
		{name: "zero", in: ChannelPolicy{}, want: defaults},
		{name: "all set", in: custom, want: custom},
		{name: "max cut below base is raised", in: ChannelPolicy{Base: time.Minute, MaxCut: time.Second},
			change: func(p *ChannelPolicy) { p.Base, p.MaxCut = time.Minute, time.Minute }},
		{name: "base above the default max cut", in: ChannelPolicy{Base: 2 * time.Hour},
			change: func(p *ChannelPolicy) { p.Base, p.MaxCut = 2*time.Hour, 2*time.Hour }},
		{name: "one field", in: ChannelPolicy{Probes: 9}, change: func(p *ChannelPolicy) { p.Probes = 9 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.want
			if tc.change != nil {
				want = defaults
				tc.change(&want)
			}
			if got := tc.in.WithDefaults(); got != want {
				t.Fatalf("got %+v, want %+v", got, want)
			}
		})
	}
}

func TestChannelWindowAddAndSuccessRate(t *testing.T) {
	w := ChannelWindow{Calls: 10, Failures: 2, Probes: 1, ProbeFailures: 1, LatencySum: time.Second, LatencyMax: 300 * time.Millisecond}
	w.Add(ChannelWindow{Calls: 30, Failures: 8, Probes: 4, LatencySum: 2 * time.Second, LatencyMax: 200 * time.Millisecond})
	want := ChannelWindow{Calls: 40, Failures: 10, Probes: 5, ProbeFailures: 1, LatencySum: 3 * time.Second, LatencyMax: 300 * time.Millisecond}
	if w != want {
		t.Fatalf("sum %+v, want %+v", w, want)
	}
	w.Add(ChannelWindow{LatencyMax: time.Second})
	if w.LatencyMax != time.Second {
		t.Fatalf("LatencyMax %v, want the larger 1s", w.LatencyMax)
	}
	for _, tc := range []struct {
		w    ChannelWindow
		want float64
	}{
		{ChannelWindow{}, 1},
		{ChannelWindow{Calls: 40, Failures: 10}, 0.75},
		{ChannelWindow{Calls: 3, Failures: 3}, 0},
		{ChannelWindow{Calls: 5}, 1},
	} {
		if got := tc.w.SuccessRate(); got != tc.want {
			t.Errorf("%+v: success rate %v, want %v", tc.w, got, tc.want)
		}
	}
}

func TestStepChannelsStartsAvailable(t *testing.T) {
	s := newChSim(t, ChannelPolicy{}, chNames("a", "b")...)
	s.step()
	s.wantTrans()
	for _, n := range []string{"a", "b"} {
		s.want(n, ChannelAvailable, 1, 0)
		if st := s.state(n); !st.Since.Equal(chT0) || st.Round != 0 || st.Manual != "" {
			t.Fatalf("new channel %+v", st)
		}
	}
	if states, trans := StepChannels(ChannelPolicy{}, nil, s.states, nil, nil, chT0, 0); len(states) != 0 || len(trans) != 0 {
		t.Fatalf("no specs: %+v, %+v", states, trans)
	}
}

func TestStepChannelsCutsOnLowSuccess(t *testing.T) {
	s := newChSim(t, ChannelPolicy{}, chNames("a", "b")...)
	s.step()
	s.wait(time.Second)
	s.calls("a", 100, 58)
	s.calls("b", 100, 0)
	s.wait(9 * time.Second)
	s.step()
	s.wantTrans("a available>cut controller")
	s.wantCut("a", 0)
	s.want("b", ChannelAvailable, 1, 0)
	tr := s.trans[0]
	if tr.Share != 0 || tr.Window.Calls != 100 || tr.Window.Failures != 58 || tr.Window.LatencySum != 100*time.Millisecond {
		t.Fatalf("transition %+v", tr)
	}
	const wantReason = "success rate 0.42 < 0.90 over 10s (58 of 100 calls failed); probes in "
	if !strings.HasPrefix(tr.Reason, wantReason) || s.state("a").Reason != tr.Reason {
		t.Fatalf("reason %q (state's %q), want %q...", tr.Reason, s.state("a").Reason, wantReason)
	}
	// It stays cut, whatever its calls, until its ProbeAt.
	s.wait(time.Second)
	s.calls("a", 100, 100)
	s.step()
	s.wantTrans()
	s.want("a", ChannelCut, 0, 0)
}

func TestStepChannelsJudgesAvailableOverTheWindow(t *testing.T) {
	for _, tc := range []struct {
		name          string
		calls, failed int
		at            time.Duration // of the calls, from chT0; the step is at 20s
		cut           bool
	}{
		{"quiet: 19 calls all failed", 19, 19, 15 * time.Second, false},
		{"20 calls at the threshold", 20, 2, 15 * time.Second, false},
		{"20 calls below the threshold", 20, 3, 15 * time.Second, true},
		{"exactly 0.9 of 1000", 1000, 100, 15 * time.Second, false},
		{"just below 0.9 of 1000", 1000, 101, 15 * time.Second, true},
		{"at the window's start", 100, 100, 10 * time.Second, true},
		{"older than the window", 100, 100, 9 * time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newChSim(t, ChannelPolicy{}, chNames("a", "b")...)
			s.states = []ChannelStatus{
				{Name: "a", State: ChannelAvailable, Share: 1, Since: chT0},
				{Name: "b", State: ChannelAvailable, Share: 1, Since: chT0},
			}
			s.now = chT0.Add(tc.at)
			s.calls("a", tc.calls, tc.failed)
			s.now = chT0.Add(20 * time.Second)
			s.step()
			if tc.cut {
				s.wantTrans("a available>cut controller")
				s.wantCut("a", 0)
			} else {
				s.wantTrans()
				s.want("a", ChannelAvailable, 1, 0)
			}
		})
	}
}

func TestStepChannelsNeverCutsTheLastAvailable(t *testing.T) {
	fresh := func(name string, st ChannelState) ChannelStatus {
		c := ChannelStatus{Name: name, State: st, Since: chT0}
		switch st {
		case ChannelAvailable:
			c.Share = 1
		case ChannelRamping:
			c.Share = 0.25
		case ChannelCut:
			c.ProbeAt = chT0.Add(time.Hour)
		}
		return c
	}
	abc := []ChannelSpec{{Name: "a", Serves: []string{"x", "y"}}, {Name: "b", Serves: []string{"x"}}, {Name: "c", Serves: []string{"y"}}}
	for _, tc := range []struct {
		name    string
		specs   []ChannelSpec
		states  map[string]ChannelState // those not available
		manual  map[string]ChannelState // stored overrides, still in force
		failing []string
		cut     []string // in order
	}{
		{name: "a single channel", specs: chNames("a"), failing: []string{"a"}},
		{name: "two failing: the first is cut", specs: chNames("a", "b"), failing: []string{"a", "b"}, cut: []string{"a"}},
		{name: "two failing, the other order", specs: chNames("b", "a"), failing: []string{"a", "b"}, cut: []string{"b"}},
		{name: "three failing: two cut", specs: chNames("a", "b", "c"), failing: []string{"a", "b", "c"}, cut: []string{"a", "b"}},
		{name: "the other is cut", specs: chNames("a", "b"), states: map[string]ChannelState{"b": ChannelCut}, failing: []string{"a"}},
		{name: "the other is probing", specs: chNames("a", "b"), states: map[string]ChannelState{"b": ChannelProbing}, failing: []string{"a"}},
		{name: "the other is ramping", specs: chNames("a", "b"), states: map[string]ChannelState{"b": ChannelRamping}, failing: []string{"a"}},
		{name: "the other is manually available", specs: chNames("a", "b"), manual: map[string]ChannelState{"b": ChannelAvailable},
			failing: []string{"a", "b"}, cut: []string{"a"}},
		{name: "a serves x and y, b only x: a is y's last", specs: abc[:2], failing: []string{"a"}},
		{name: "a serves x and y, b only x: b may go", specs: abc[:2], failing: []string{"a", "b"}, cut: []string{"b"}},
		{name: "b and c cover a", specs: abc, failing: []string{"a"}, cut: []string{"a"}},
		{name: "a is cut first, then b and c are last", specs: abc, failing: []string{"a", "b", "c"}, cut: []string{"a"}},
		{name: "c ramping: a is y's last", specs: abc, states: map[string]ChannelState{"c": ChannelRamping}, failing: []string{"a"}},
		{name: "scenarios apart", specs: []ChannelSpec{{Name: "a", Serves: []string{"x"}}, {Name: "b", Serves: []string{"y"}}},
			failing: []string{"a", "b"}},
		{name: "no serves is one scenario apart from named ones", specs: []ChannelSpec{{Name: "a"}, {Name: "b", Serves: []string{"x"}}},
			failing: []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newChSim(t, ChannelPolicy{}, tc.specs...)
			for _, sp := range tc.specs {
				st := fresh(sp.Name, ChannelAvailable)
				if state, ok := tc.states[sp.Name]; ok {
					st = fresh(sp.Name, state)
				}
				if m := tc.manual[sp.Name]; m != "" {
					st.Manual = m
					s.overrides[sp.Name] = m
				}
				s.states = append(s.states, st)
			}
			s.wait(time.Second)
			for _, n := range tc.failing {
				s.calls(n, 100, 100)
			}
			s.wait(time.Second)
			s.step()
			var want []string
			for _, n := range tc.cut {
				want = append(want, n+" available>cut controller")
			}
			s.wantTrans(want...)
			// The next step cuts no more.
			s.wait(time.Second)
			for _, n := range tc.failing {
				s.calls(n, 100, 100)
			}
			s.step()
			s.wantTrans()
		})
	}
}

func TestStepChannelsBackoffDoublesToTheCapAndResets(t *testing.T) {
	s := newChSim(t, ChannelPolicy{}, chNames("a", "b")...)
	s.step()
	s.wait(time.Second)
	s.calls("a", 20, 20)
	s.step()
	s.wantTrans("a available>cut controller")
	s.wantCut("a", 0) // 5m

	// Failed probe rounds: 10m, 20m, 40m, then 80m capped at 1h, twice.
	for n := 1; n <= 5; n++ {
		s.probeRound("a", 1, 1)
		s.wantTrans("a probing>cut controller")
		s.wantCut("a", n)
		if st := s.state("a"); st.Round != uint64(n) {
			t.Fatalf("round %d after %d probe rounds", st.Round, n)
		}
	}
	if got := s.state("a").ProbeAt.Sub(s.now); got < 54*time.Minute || got > 66*time.Minute {
		t.Fatalf("cut for %v, want 1h ±10%%", got)
	}

	// A round passes: n stays while the channel ramps, and a failed ramp
	// step makes it 6.
	s.probeRound("a", 5, 0)
	s.wantTrans("a probing>ramping controller")
	s.want("a", ChannelRamping, 1.0/16, 5)
	s.wait(time.Second)
	s.calls("a", 20, 10)
	s.step()
	s.wantTrans("a ramping>cut controller")
	s.wantCut("a", 6)

	// Back to available: n is 0 again, and the next cut lasts Base.
	s.probeRound("a", 5, 0)
	s.wantTrans("a probing>ramping controller")
	s.rampUp("a")
	s.wait(time.Second)
	s.calls("a", 20, 20)
	s.wait(time.Second)
	s.step()
	s.wantTrans("a available>cut controller")
	s.wantCut("a", 0)
}

func TestChannelCutLength(t *testing.T) {
	p := ChannelPolicy{}.WithDefaults()
	for n, want := range []time.Duration{5 * time.Minute, 10 * time.Minute, 20 * time.Minute, 40 * time.Minute, time.Hour, time.Hour} {
		lo, hi := time.Duration(1<<63-1), time.Duration(0)
		for r := range uint64(2000) {
			d := p.cutLength(n, splitmix64(r))
			lo, hi = min(lo, d), max(hi, d)
		}
		if lo < want*9/10 || hi > want*11/10 || lo > want*91/100 || hi < want*109/100 {
			t.Errorf("n=%d: cuts in [%v, %v], want spread over %v ±10%%", n, lo, hi, want)
		}
	}
	// r picks: 0 is the low end, the middle is the length itself.
	if got := p.cutLength(0, 0); got != 4*time.Minute+30*time.Second {
		t.Errorf("r=0: %v, want 4m30s", got)
	}
	if got := p.cutLength(0, 1<<63); got != 5*time.Minute {
		t.Errorf("r=2^63: %v, want 5m", got)
	}
	for _, n := range []int{62, 63, 64, 1000} {
		if got := p.cutLength(n, 1<<63); got != time.Hour {
			t.Errorf("n=%d: %v, want the cap", n, got)
		}
	}
	if got := p.cutLength(-3, 1<<63); got != 5*time.Minute {
		t.Errorf("n=-3: %v, want Base", got)
	}
	wild := ChannelPolicy{Jitter: 3}.WithDefaults()
	if got := wild.cutLength(0, 0); got != 0 {
		t.Errorf("jitter 3, r=0: %v, want 0 (never below)", got)
	}
	huge := ChannelPolicy{Base: 1 << 62, MaxCut: 1<<63 - 1}.WithDefaults()
	if got := huge.cutLength(5, 1<<64-1); got != 1<<63-1 {
		t.Errorf("huge: %v, want the largest duration", got)
	}
}

func TestStepChannelsJitterIsDeterministicAndPerChannel(t *testing.T) {
	run := func(rnd uint64) []ChannelStatus {
		s := newChSim(t, ChannelPolicy{}, chNames("a", "b", "c")...)
		s.step()
		s.wait(time.Second)
		s.calls("a", 100, 100)
		s.calls("b", 100, 100)
		s.wait(time.Second)
		s.rnd = rnd - 1 // step adds 1
		s.step()
		s.wantTrans("a available>cut controller", "b available>cut controller")
		s.wantCut("a", 0)
		s.wantCut("b", 0)
		return s.states
	}
	first, again, other := run(42), run(42), run(43)
	if !reflect.DeepEqual(first, again) {
		t.Fatalf("same inputs, different states:\n%+v\n%+v", first, again)
	}
	if first[0].ProbeAt.Equal(first[1].ProbeAt) {
		t.Fatalf("a and b cut for the same %v in one step", first[0].ProbeAt.Sub(first[0].Since))
	}
	if first[0].ProbeAt.Equal(other[0].ProbeAt) {
		t.Fatal("another random number, the same cut")
	}
}

func TestStepChannelsProbesPassAndRampDoubles(t *testing.T) {
	s := newChSim(t, ChannelPolicy{}, chNames("a", "b")...)
	s.step()
	s.wait(time.Second)
	s.calls("a", 20, 20)
	s.step()
	s.wantCut("a", 0)

	// 4 of 5 probes: the round is not over.
	s.probeAt("a")
	s.wait(time.Second)
	s.probes("a", 4, 0)
	s.wait(time.Second)
	s.step()
	s.wantTrans()
	s.want("a", ChannelProbing, 0, 0)
	s.wait(time.Second)
	s.probes("a", 1, 0)
	s.wait(time.Second)
	s.step()
	s.wantTrans("a probing>ramping controller")
	s.want("a", ChannelRamping, 1.0/16, 0)
	if tr := s.trans[0]; tr.Share != 1.0/16 || tr.Window.Probes != 5 || !strings.HasPrefix(tr.Reason, "0 of 5 probes failed (success rate 1.00 ≥ 0.90)") {
		t.Fatalf("transition %+v", tr)
	}
	if st := s.state("a"); !st.Since.Equal(s.now) || !st.ProbeAt.IsZero() {
		t.Fatalf("ramping %+v", st)
	}

	// A step holds until a window has passed, then doubles.
	rampSince := s.now
	s.wait(time.Second)
	s.calls("a", 20, 0)
	s.now = rampSince.Add(s.p.Window - time.Nanosecond)
	s.step()
	s.wantTrans()
	s.want("a", ChannelRamping, 1.0/16, 0)
	s.now = rampSince.Add(s.p.Window)
	s.step()
	s.wantTrans("a ramping>ramping controller")
	s.want("a", ChannelRamping, 1.0/8, 0)
	if tr := s.trans[0]; tr.Share != 1.0/8 || tr.Window.Calls != 20 || !s.state("a").Since.Equal(s.now) {
		t.Fatalf("ramp step %+v", tr)
	}
	s.rampUp("a") // 1/4, 1/2, available
	if st := s.state("a"); !st.Since.Equal(s.now) || st.Round != 1 {
		t.Fatalf("available %+v", st)
	}
}

func TestStepChannelsJudgesProbeRounds(t *testing.T) {
	strict := ChannelPolicy{Probes: 10, Threshold: 0.8}
	for _, tc := range []struct {
		name          string
		p             ChannelPolicy
		probes, fails int
		after         time.Duration // from the round's start to the step
		want          ChannelState
	}{
		{"none yet", ChannelPolicy{}, 0, 0, 2 * time.Second, ChannelProbing},
		{"a quiet hour stalls", ChannelPolicy{}, 0, 0, time.Hour, ChannelProbing},
		{"4 of 5", ChannelPolicy{}, 4, 0, 2 * time.Second, ChannelProbing},
		{"5 of 5", ChannelPolicy{}, 5, 0, 2 * time.Second, ChannelRamping},
		{"1 failed of 5", ChannelPolicy{}, 5, 1, 2 * time.Second, ChannelCut},
		{"early: the first failed", ChannelPolicy{}, 1, 1, 2 * time.Second, ChannelCut},
		{"strict: 2 failed of 4, can still pass", strict, 4, 2, 2 * time.Second, ChannelProbing},
		{"strict: 3 failed of 4, cannot", strict, 4, 3, 2 * time.Second, ChannelCut},
		{"strict: 2 failed of 10", strict, 10, 2, 2 * time.Second, ChannelRamping},
		{"strict: 3 failed of 10", strict, 10, 3, 2 * time.Second, ChannelCut},
		{"strict: judged on all 15 seen", strict, 15, 3, 2 * time.Second, ChannelRamping},
		{"strict: 3 failed of 12 seen", strict, 12, 3, 2 * time.Second, ChannelCut},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newChSim(t, tc.p, chNames("a", "b")...)
			s.states = []ChannelStatus{
				{Name: "a", State: ChannelProbing, Fails: 2, Since: chT0, Round: 7, Reason: "probing"},
				{Name: "b", State: ChannelAvailable, Share: 1, Since: chT0},
			}
			s.wait(time.Second)
			s.probes("a", tc.probes, tc.fails)
			s.now = chT0.Add(tc.after)
			s.step()
			switch tc.want {
			case ChannelProbing:
				s.wantTrans()
				s.want("a", ChannelProbing, 0, 2)
			case ChannelRamping:
				s.wantTrans("a probing>ramping controller")
				s.want("a", ChannelRamping, 1.0/16, 2)
			case ChannelCut:
				s.wantTrans("a probing>cut controller")
				s.wantCut("a", 3) // 40m
				if tr := s.trans[0]; tr.Window.Probes != tc.probes || tr.Window.ProbeFailures != tc.fails {
					t.Fatalf("transition's window %+v", tr.Window)
				}
			}
			if st := s.state("a"); st.Round != 7 {
				t.Fatalf("round %d, want 7", st.Round)
			}
		})
	}
}

func TestStepChannelsJudgesRampSteps(t *testing.T) {
	for _, tc := range []struct {
		name          string
		share         float64
		calls, failed int
		after         time.Duration // from the step's start to the controller's
		want          ChannelState
		share2        float64
	}{
		{"enough failures cut at once", 0.25, 20, 10, 5 * time.Second, ChannelCut, 0},
		{"few failures wait for the window", 0.25, 19, 19, 5 * time.Second, ChannelRamping, 0.25},
		{"healthy but the window is not over", 0.25, 30, 0, 9 * time.Second, ChannelRamping, 0.25},
		{"a window: 5 calls, 1 failed", 0.25, 5, 1, 10 * time.Second, ChannelCut, 0},
		{"a window: 5 calls all good", 0.25, 5, 0, 10 * time.Second, ChannelRamping, 0.5},
		{"a window at the threshold", 0.25, 30, 3, 10 * time.Second, ChannelRamping, 0.5},
		{"a window of 4 calls stalls", 0.25, 4, 0, 10 * time.Second, ChannelRamping, 0.25},
		{"an hour of 4 calls stalls", 0.25, 4, 4, time.Hour, ChannelRamping, 0.25},
		{"the last step", 0.5, 30, 0, 10 * time.Second, ChannelAvailable, 1},
		{"a late window is judged all the same", 0.125, 5, 0, 12 * time.Second, ChannelRamping, 0.25},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newChSim(t, ChannelPolicy{}, chNames("a", "b")...)
			s.states = []ChannelStatus{
				{Name: "a", State: ChannelRamping, Share: tc.share, Fails: 1, Since: chT0, Round: 3},
				{Name: "b", State: ChannelAvailable, Share: 1, Since: chT0},
			}
			s.wait(time.Second)
			s.calls("a", tc.calls, tc.failed)
			s.now = chT0.Add(tc.after)
			s.step()
			st := s.state("a")
			switch tc.want {
			case ChannelCut:
				s.wantTrans("a ramping>cut controller")
				s.wantCut("a", 2)
			case ChannelAvailable:
				s.wantTrans("a ramping>available controller")
				s.want("a", ChannelAvailable, 1, 0)
			case ChannelRamping:
				if tc.share2 == tc.share {
					s.wantTrans()
					s.want("a", ChannelRamping, tc.share, 1)
					if !st.Since.Equal(chT0) {
						t.Fatalf("a stalled step moved: since %v", st.Since)
					}
					return
				}
				s.wantTrans("a ramping>ramping controller")
				s.want("a", ChannelRamping, tc.share2, 1)
			}
			if !st.Since.Equal(s.now) {
				t.Fatalf("since %v, want now", st.Since)
			}
		})
	}
}

func TestStepChannelsManualCut(t *testing.T) {
	s := newChSim(t, ChannelPolicy{}, chNames("a")...)
	s.step()
	// The operator cuts the only channel, which the controller never would.
	s.wait(time.Second)
	s.overrides["a"] = ChannelCut
	s.step()
	s.wantTrans("a available>cut manual")
	s.want("a", ChannelCut, 0, 0)
	if st := s.state("a"); st.Manual != ChannelCut || !st.ProbeAt.IsZero() || !st.Since.Equal(s.now) {
		t.Fatalf("manual cut %+v", st)
	}
	cutAt := s.now
	// It stays cut, hours on, with nothing more to say.
	for range 3 {
		s.wait(3 * time.Hour)
		s.step()
		s.wantTrans()
		s.want("a", ChannelCut, 0, 0)
	}
	if st := s.state("a"); !st.Since.Equal(cutAt) {
		t.Fatalf("since %v moved from %v", st.Since, cutAt)
	}
	// Cleared: it probes at once.
	delete(s.overrides, "a")
	s.wait(time.Second)
	s.step()
	s.wantTrans("a cut>probing manual")
	s.want("a", ChannelProbing, 0, 0)
	if st := s.state("a"); st.Manual != "" || st.Round != 1 || !st.Since.Equal(s.now) {
		t.Fatalf("cleared %+v", st)
	}
	s.wait(time.Second)
	s.probes("a", 5, 0)
	s.wait(time.Second)
	s.step()
	s.wantTrans("a probing>ramping controller")
}

func TestStepChannelsManualCutOverridesEveryState(t *testing.T) {
	for _, st := range []ChannelStatus{
		{Name: "a", State: ChannelRamping, Share: 0.5, Fails: 3, Since: chT0, Round: 4},
		{Name: "a", State: ChannelProbing, Fails: 3, Since: chT0, Round: 4},
		{Name: "a", State: ChannelCut, Fails: 3, Since: chT0, ProbeAt: chT0.Add(time.Minute), Round: 4},
	} {
		t.Run(string(st.State), func(t *testing.T) {
			s := newChSim(t, ChannelPolicy{}, chNames("a", "b")...)
			s.states = []ChannelStatus{st, {Name: "b", State: ChannelAvailable, Share: 1, Since: chT0}}
			s.overrides["a"] = ChannelCut
			s.wait(time.Second)
			s.probes("a", 5, 0) // passing probes and ramp calls: ignored
			s.wait(time.Hour)
			s.step()
			if st.State == ChannelCut {
				s.wantTrans() // the same state: no transition, but the override holds it
			} else {
				s.wantTrans("a " + string(st.State) + ">cut manual")
			}
			s.want("a", ChannelCut, 0, 3)
			if got := s.state("a"); got.Manual != ChannelCut || !got.ProbeAt.IsZero() {
				t.Fatalf("manual cut %+v", got)
			}
			// Cleared: probing at once, n from 0.
			delete(s.overrides, "a")
			s.wait(time.Second)
			s.step()
			s.wantTrans("a cut>probing manual")
			s.want("a", ChannelProbing, 0, 0)
			if got := s.state("a"); got.Round != 5 {
				t.Fatalf("round %d, want 5", got.Round)
			}
		})
	}
}

func TestStepChannelsManualAvailable(t *testing.T) {
	s := newChSim(t, ChannelPolicy{}, chNames("a", "b", "c")...)
	s.step()
	s.overrides["a"] = ChannelAvailable
	s.wait(time.Second)
	s.step()
	s.wantTrans() // already available: the override is recorded, no transition
	if st := s.state("a"); st.Manual != ChannelAvailable || !st.Since.Equal(s.now) {
		t.Fatalf("manual available %+v", st)
	}
	// a fails all its calls and stays in; b, failing as much, is cut.
	for k := range 5 {
		s.wait(time.Second)
		s.calls("a", 100, 100)
		s.calls("b", 100, 100)
		s.step()
		if k == 0 {
			s.wantTrans("b available>cut controller")
		} else {
			s.wantTrans()
		}
	}
	s.want("a", ChannelAvailable, 1, 0)
	// Cleared: what a did under the override does not count...
	delete(s.overrides, "a")
	s.wait(time.Second)
	s.step()
	s.wantTrans()
	s.want("a", ChannelAvailable, 1, 0)
	if st := s.state("a"); st.Manual != "" || !st.Since.Equal(s.now) {
		t.Fatalf("cleared %+v", st)
	}
	s.wait(time.Second)
	s.step()
	s.wantTrans()
	// ...what it does next does.
	s.calls("a", 100, 100)
	s.wait(time.Second)
	s.step()
	s.wantTrans("a available>cut controller")
	s.wantCut("a", 0)
}

func TestStepChannelsManualAvailableOnACutChannel(t *testing.T) {
	s := newChSim(t, ChannelPolicy{}, chNames("a", "b")...)
	s.states = []ChannelStatus{
		{Name: "a", State: ChannelCut, Fails: 4, Since: chT0, ProbeAt: chT0.Add(time.Hour), Round: 4},
		{Name: "b", State: ChannelAvailable, Share: 1, Since: chT0},
	}
	s.overrides["a"] = ChannelAvailable
	s.wait(time.Second)
	s.step()
	s.wantTrans("a cut>available manual")
	s.want("a", ChannelAvailable, 1, 0)
	if st := s.state("a"); !st.ProbeAt.IsZero() || st.Manual != ChannelAvailable || !st.Since.Equal(s.now) {
		t.Fatalf("manual available %+v", st)
	}
	// The same override again: nothing.
	s.wait(time.Second)
	s.step()
	s.wantTrans()
	// Switched to a cut.
	s.overrides["a"] = ChannelCut
	s.wait(time.Second)
	s.step()
	s.wantTrans("a available>cut manual")
	if st := s.state("a"); st.Manual != ChannelCut {
		t.Fatalf("manual %q", st.Manual)
	}
}

func TestStepChannelsOverridesSeenBeforeTheController(t *testing.T) {
	// b comes first and fails; a, after it, is cut by the operator in
	// the same step: b must stay, as the last available channel.
	s := newChSim(t, ChannelPolicy{}, chNames("b", "a")...)
	s.step()
	s.wait(time.Second)
	s.calls("b", 100, 100)
	s.overrides["a"] = ChannelCut
	s.step()
	s.wantTrans("a available>cut manual")
	s.want("b", ChannelAvailable, 1, 0)
}

func TestStepChannelsIgnoresOtherOverrides(t *testing.T) {
	s := newChSim(t, ChannelPolicy{}, chNames("a", "b")...)
	s.step()
	s.overrides["a"] = ChannelProbing
	s.overrides["nobody"] = ChannelCut
	s.wait(time.Second)
	s.calls("a", 100, 100)
	s.step()
	s.wantTrans("a available>cut controller")
	if st := s.state("a"); st.Manual != "" {
		t.Fatalf("manual %q", st.Manual)
	}
	// An override of another value clears one in force.
	s.overrides["b"] = ChannelAvailable
	s.wait(time.Second)
	s.step()
	s.overrides["b"] = ChannelRamping
	s.wait(time.Second)
	s.step()
	if st := s.state("b"); st.Manual != "" || !st.Since.Equal(s.now) {
		t.Fatalf("b %+v", st)
	}
}

func TestStepChannelsSpecsChange(t *testing.T) {
	s := newChSim(t, ChannelPolicy{}, chNames("a", "b")...)
	s.step()
	s.wait(time.Second)
	s.calls("a", 100, 100)
	s.step()
	s.wantCut("a", 0)
	cutA := s.state("a")
	// b goes, c comes first; a keeps its state.
	s.specs = chNames("c", "a")
	s.wait(time.Minute)
	s.step()
	s.wantTrans()
	if len(s.states) != 2 || s.states[0].Name != "c" || s.states[1] != cutA {
		t.Fatalf("states %+v, want c then a as it was %+v", s.states, cutA)
	}
	s.want("c", ChannelAvailable, 1, 0)
	if st := s.state("c"); !st.Since.Equal(s.now) {
		t.Fatalf("c since %v", st.Since)
	}
	// b back: it starts over, available.
	s.specs = chNames("a", "b", "c")
	s.wait(time.Second)
	s.step()
	s.want("b", ChannelAvailable, 1, 0)
	if st := s.state("b"); !st.Since.Equal(s.now) {
		t.Fatalf("b since %v", st.Since)
	}
	// A stored state this code does not know starts over too.
	s.states[1].State = "gone"
	s.step()
	s.want("b", ChannelAvailable, 1, 0)
}

func TestStepChannelsLeaderChangeMidRamp(t *testing.T) {
	s := newChSim(t, ChannelPolicy{}, chNames("a", "b", "c")...)
	s.step()
	s.wait(time.Second)
	s.calls("a", 100, 100)
	s.step()
	s.wantTrans("a available>cut controller")
	s.probeRound("a", 5, 0)
	s.rampStep("a", 20, 0)
	s.want("a", ChannelRamping, 1.0/8, 0)
	rampSince := s.state("a").Since
	s.wait(time.Second)
	s.calls("b", 100, 100)
	s.step()
	s.wantTrans("b available>cut controller")

	// The lease moves: the new leader reads the stored document and counts
	// afresh.
	doc, err := json.Marshal(s.states)
	if err != nil {
		t.Fatal(err)
	}
	var stored []ChannelStatus
	if err := json.Unmarshal(doc, &stored); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(stored, s.states) {
		t.Fatalf("stored\n%+v\nread back\n%+v", s.states, stored)
	}
	next := newChSim(t, ChannelPolicy{}, s.specs...)
	next.states, next.now, next.rnd = stored, s.now.Add(3*time.Second), 1000
	next.step()
	next.wantTrans()
	next.want("a", ChannelRamping, 1.0/8, 0)
	if st := next.state("a"); !st.Since.Equal(rampSince) {
		t.Fatalf("since %v, want %v", st.Since, rampSince)
	}
	// Its calls, counted by the new leader, finish the step.
	next.calls("a", 10, 0)
	next.now = rampSince.Add(next.p.Window)
	next.step()
	next.wantTrans("a ramping>ramping controller")
	next.want("a", ChannelRamping, 1.0/4, 0)
	next.rampUp("a")
	// b's cut carried over too: it probes at its stored ProbeAt.
	next.probeAt("b")
}

func TestStepChannelsLongRandomTimeline(t *testing.T) {
	specs := []ChannelSpec{{Name: "a", Serves: []string{"x", "y"}}, {Name: "b", Serves: []string{"x"}},
		{Name: "c", Serves: []string{"y"}}, {Name: "d", Serves: []string{"x", "y"}}}
	s := newChSim(t, ChannelPolicy{Base: 30 * time.Second, MaxCut: 5 * time.Minute}, specs...)
	rng := rand.New(rand.NewPCG(1, 2))
	health := map[string]float64{"a": 1, "b": 1, "c": 1, "d": 1}
	seen := map[string]int{}
	for range 20000 {
		if rng.IntN(200) == 0 {
			for _, sp := range specs {
				health[sp.Name] = []float64{0, 0.5, 0.95, 1, 1}[rng.IntN(5)]
			}
		}
		if rng.IntN(500) == 0 {
			n := specs[rng.IntN(len(specs))].Name
			s.overrides[n] = []ChannelState{"", ChannelCut, ChannelAvailable}[rng.IntN(3)]
		}
		for _, st := range s.states {
			calls := 0
			switch st.State {
			case ChannelAvailable:
				calls = 30
			case ChannelRamping:
				calls = max(1, int(30*st.Share))
			case ChannelProbing:
				calls = rng.IntN(2)
			}
			failed := 0
			for range calls {
				if rng.Float64() >= health[st.Name] {
					failed++
				}
			}
			if st.State == ChannelProbing {
				s.probes(st.Name, calls, failed)
			} else {
				s.calls(st.Name, calls, failed)
			}
		}
		s.wait(time.Duration(1+rng.IntN(3)) * time.Second)
		for _, tr := range s.step() {
			seen[fmt.Sprintf("%s>%s %s", tr.From, tr.To, tr.By)]++
		}
	}
	for _, k := range []string{"available>cut controller", "cut>probing controller", "probing>cut controller",
		"probing>ramping controller", "ramping>ramping controller", "ramping>cut controller",
		"ramping>available controller", "available>cut manual", "cut>probing manual"} {
		if seen[k] == 0 {
			t.Errorf("no %s in the timeline: %v", k, seen)
		}
	}
}

func TestChannelCountsBucketEdges(t *testing.T) {
	c := NewChannelCounts(10 * time.Second)
	c.Add("a", chT0.Add(999*time.Millisecond), ChannelWindow{Calls: 1})
	c.Add("a", chT0.Add(time.Second), ChannelWindow{Calls: 2, Failures: 1})
	for _, tc := range []struct {
		since, now time.Duration
		want       int
	}{
		{0, 500 * time.Millisecond, 1},
		{0, time.Second - 1, 1},
		{time.Second, time.Second, 2},
		{500 * time.Millisecond, time.Second, 3}, // since's bucket included
		{time.Second + 1, 5 * time.Second, 2},
		{2 * time.Second, 5 * time.Second, 0},
		{-time.Hour, 10 * time.Second, 3},
		{time.Second, 0, 0}, // since after now
	} {
		if got := c.Sum("a", chT0.Add(tc.since), chT0.Add(tc.now)); got.Calls != tc.want {
			t.Errorf("Sum(%v, %v) = %d calls, want %d", tc.since, tc.now, got.Calls, tc.want)
		}
	}
	if got := c.Sum("a", chT0, chT0.Add(time.Second)); got.Failures != 1 {
		t.Errorf("failures %d, want 1", got.Failures)
	}
	if got := c.Sum("nobody", chT0, chT0.Add(time.Second)); got != (ChannelWindow{}) {
		t.Errorf("unknown channel: %+v", got)
	}
	if got := NewChannelCounts(time.Second).Sum("a", chT0, chT0); got != (ChannelWindow{}) {
		t.Errorf("empty counts: %+v", got)
	}
}

func TestChannelCountsSpan(t *testing.T) {
	c := NewChannelCounts(10 * time.Second)
	all := func(ch string, now time.Duration) int { return c.Sum(ch, chT0.Add(-time.Hour), chT0.Add(now)).Calls }
	c.Add("a", chT0, ChannelWindow{Calls: 1})
	if got := all("a", 10*time.Second); got != 1 {
		t.Fatalf("10s later, a's bucket holds %d calls, want 1", got)
	}
	// One more second: a's bucket is out of the span, though nothing wrote
	// over it (the slot of second 11 holds second 0's).
	if got := all("a", 11*time.Second); got != 0 {
		t.Fatalf("11s later, a's bucket holds %d calls, want 0", got)
	}
	// Late reports: at the span's edge counted, beyond it dropped.
	c.Add("a", chT0.Add(time.Second), ChannelWindow{Calls: 10})
	c.Add("a", chT0, ChannelWindow{Calls: 100})
	c.Add("a", chT0.Add(11*time.Second), ChannelWindow{Calls: 1000})
	if got := all("a", 11*time.Second); got != 1010 {
		t.Fatalf("late reports: %d calls, want 1010", got)
	}
	// Seconds written later take the slots over.
	c.Add("b", chT0.Add(12*time.Second), ChannelWindow{Calls: 1}) // b moves the newest second on, for all
	c.Add("a", chT0.Add(13*time.Second), ChannelWindow{Calls: 10000})
	if got := all("a", 13*time.Second); got != 11000 {
		t.Fatalf("later: %d calls, want 11000", got)
	}
}

func TestChannelCountsSpanRounding(t *testing.T) {
	for _, tc := range []struct {
		span time.Duration
		keep int // seconds before the newest kept
	}{
		{2500 * time.Millisecond, 3},
		{3 * time.Second, 3},
		{0, 1},
		{-time.Second, 1},
		{time.Nanosecond, 1},
	} {
		c := NewChannelCounts(tc.span)
		newest := chT0.Add(time.Minute)
		c.Add("b", newest, ChannelWindow{Calls: 1})
		for back := 0; back <= tc.keep+1; back++ {
			c.Add("a", newest.Add(-time.Duration(back)*time.Second), ChannelWindow{Calls: 1})
		}
		if got := c.Sum("a", chT0, newest).Calls; got != tc.keep+1 {
			t.Errorf("span %v: %d seconds kept, want %d", tc.span, got, tc.keep+1)
		}
	}
}

func TestChannelCountsWildClock(t *testing.T) {
	c := NewChannelCounts(10 * time.Second)
	c.Add("a", chT0, ChannelWindow{Calls: 1})
	c.Add("a", chT0.Add(time.Hour), ChannelWindow{Calls: 100}) // far ahead: dropped
	c.Add("a", chT0.Add(6*time.Second), ChannelWindow{Calls: 100})
	if got := c.Sum("a", chT0, chT0.Add(time.Second)).Calls; got != 1 {
		t.Fatalf("%d calls, want 1: reports far ahead count", got)
	}
	// A little ahead counts, and moves the newest second on.
	c.Add("a", chT0.Add(5*time.Second), ChannelWindow{Calls: 10})
	c.Add("a", chT0.Add(10*time.Second), ChannelWindow{Calls: 100})
	if got := c.Sum("a", chT0, chT0.Add(10*time.Second)).Calls; got != 111 {
		t.Fatalf("%d calls, want 111", got)
	}
	// Before 1970 as well.
	old := time.Date(1960, 1, 1, 0, 0, 0, 0, time.UTC)
	c = NewChannelCounts(3 * time.Second)
	for k := range 5 {
		c.Add("a", old.Add(time.Duration(k)*time.Second+time.Millisecond), ChannelWindow{Calls: 1 << k})
	}
	if got := c.Sum("a", old, old.Add(4*time.Second)).Calls; got != 2+4+8+16 {
		t.Fatalf("before 1970: %d calls, want 30", got)
	}
}

func TestChannelCountsAfterAQuietSpell(t *testing.T) {
	c := NewChannelCounts(10 * time.Second)
	c.Add("a", chT0, ChannelWindow{Calls: 1})
	// An hour without a report; the controller read on.
	later := chT0.Add(time.Hour)
	if got := c.Sum("a", later.Add(-10*time.Second), later); got.Calls != 0 {
		t.Fatalf("an hour on: %d calls", got.Calls)
	}
	c.Add("a", later.Add(2*time.Second), ChannelWindow{Calls: 5})
	c.Add("a", chT0, ChannelWindow{Calls: 100}) // the old second is now out of the span
	if got := c.Sum("a", later, later.Add(2*time.Second)); got.Calls != 5 {
		t.Fatalf("after the quiet spell: %d calls, want 5", got.Calls)
	}
}

func TestChannelCountsConcurrent(t *testing.T) {
	c := NewChannelCounts(20 * time.Second)
	const workers, reports = 8, 500
	var wg sync.WaitGroup
	for g := range workers {
		wg.Go(func() {
			ch := []string{"a", "b"}[g%2]
			for k := range reports {
				c.Add(ch, chT0.Add(time.Duration(k%5)*time.Second), ChannelWindow{Calls: 2, Failures: 1})
			}
		})
		wg.Go(func() {
			for range reports {
				if w := c.Sum("a", chT0, chT0.Add(4*time.Second)); w.Failures*2 != w.Calls {
					t.Errorf("torn read %+v", w)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, ch := range []string{"a", "b"} {
		if got := c.Sum(ch, chT0, chT0.Add(4*time.Second)); got.Calls != workers/2*reports*2 {
			t.Errorf("%s: %d calls, want %d", ch, got.Calls, workers/2*reports*2)
		}
	}
}
