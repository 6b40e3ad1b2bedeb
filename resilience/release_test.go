package resilience_test

import (
	"strings"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/resilience"
)

// releaseRun drives StepRelease over a fake clock, with the canary's
// and the stable channels' outcomes counted in a real ChannelCounts.
type releaseRun struct {
	t      *testing.T
	p      resilience.ReleasePolicy
	st     resilience.ReleaseState
	now    time.Time
	counts *resilience.ChannelCounts
	gate   resilience.ReleaseGate
	events []*resilience.ReleaseEvent
}

func newReleaseRun(t *testing.T, p resilience.ReleasePolicy) *releaseRun {
	return &releaseRun{t: t, p: p, now: time.Unix(1_000_000, 0), counts: resilience.NewChannelCounts(10 * time.Minute),
		gate: func(c, _, _ resilience.ChannelWindow) (bool, string) {
			if c.ErrorRate() > 0.05 {
				return true, "error rate above 5 %"
			}
			return false, ""
		}}
}

// second advances one second: canary and stable calls, then a step.
func (r *releaseRun) second(canaryCalls, canaryFailed int, cmd *resilience.ReleaseCommand) *resilience.ReleaseEvent {
	r.t.Helper()
	r.now = r.now.Add(time.Second)
	r.counts.Add("v2", r.now, resilience.ChannelWindow{Calls: canaryCalls, Failures: canaryFailed})
	r.counts.Add("v1", r.now, resilience.ChannelWindow{Calls: 100})
	obs := func(ch string) func(time.Time) resilience.ChannelWindow {
		return func(since time.Time) resilience.ChannelWindow { return r.counts.Sum(ch, since, r.now) }
	}
	var ev *resilience.ReleaseEvent
	r.st, ev = resilience.StepRelease(r.p, r.st, "v2", cmd, obs("v2"), obs("v1"), nil, r.gate, r.now)
	if ev != nil {
		r.events = append(r.events, ev)
	}
	return ev
}

func (r *releaseRun) want(stage resilience.ReleaseStage, percent float64) {
	r.t.Helper()
	if r.st.Stage != stage || r.st.Percent != percent {
		r.t.Fatalf("release %s at %v %%, want %s at %v %% (%s)", r.st.Stage, r.st.Percent, stage, percent, r.st.Reason)
	}
}

func cmd(id, action string) *resilience.ReleaseCommand {
	return &resilience.ReleaseCommand{ID: id, Action: action, By: "ops"}
}

// Steps: each window whose canary calls pass the gates raises the
// percent to the next step; after the last, the release is promoted.
func TestReleaseStepsToPromotion(t *testing.T) {
	r := newReleaseRun(t, resilience.ReleasePolicy{Steps: []float64{1, 10, 50}, Window: 5 * time.Second, MinCalls: 10})
	r.second(0, 0, nil)
	r.want(resilience.ReleasePending, 0)
	if ev := r.second(0, 0, cmd("c1", resilience.ReleaseStart)); ev == nil || ev.By != "manual" {
		t.Fatalf("start: %+v", ev)
	}
	r.want(resilience.ReleaseRunning, 1)
	// A repeated command (same id) is not applied twice.
	if ev := r.second(5, 0, cmd("c1", resilience.ReleaseStart)); ev != nil {
		t.Fatalf("command applied twice: %+v", ev)
	}
	for i, pc := range []float64{10, 50} {
		for range 5 - 1 + i { // a window of 5 s from the step's start
			r.second(5, 0, nil)
		}
		r.want(resilience.ReleaseRunning, pc)
	}
	for range 4 {
		r.second(5, 0, nil)
	}
	r.want(resilience.ReleaseRunning, 50)
	for range 1 {
		r.second(5, 0, nil)
	}
	r.want(resilience.ReleasePromoted, 100)
	if last := r.events[len(r.events)-1]; last.By != "controller" || !strings.Contains(last.Reason, "every step passed") {
		t.Fatalf("promotion: %+v", last)
	}
}

// Doubling from start, and a step without enough canary calls waits.
func TestReleaseDoublingWaitsForCalls(t *testing.T) {
	r := newReleaseRun(t, resilience.ReleasePolicy{Start: 25, Window: 2 * time.Second, MinCalls: 10})
	r.second(0, 0, cmd("go", resilience.ReleaseStart))
	r.want(resilience.ReleaseRunning, 25)
	for range 5 {
		r.second(1, 0, nil) // 5 calls in 5 s: too few
	}
	r.want(resilience.ReleaseRunning, 25)
	r.second(10, 0, nil)
	r.want(resilience.ReleaseRunning, 50)
	r.second(10, 0, nil)
	r.second(10, 0, nil)
	r.want(resilience.ReleaseRunning, 100)
	r.second(10, 0, nil)
	r.second(10, 0, nil)
	r.want(resilience.ReleasePromoted, 100)
}

// A step that breaches a gate sets the canary to 0 at once, with why and
// the figures; pause holds, resume goes on, rollback and promote are the
// operator's.
func TestReleaseGateBreachAndCommands(t *testing.T) {
	r := newReleaseRun(t, resilience.ReleasePolicy{Steps: []float64{5, 50}, Window: 3 * time.Second, MinCalls: 10})
	r.second(0, 0, cmd("1", resilience.ReleaseStart))
	r.second(10, 0, cmd("2", resilience.ReleasePause))
	r.want(resilience.ReleasePaused, 5)
	for range 5 {
		r.second(10, 0, nil)
	}
	r.want(resilience.ReleasePaused, 5)
	r.second(10, 0, cmd("3", resilience.ReleaseResume))
	r.want(resilience.ReleaseRunning, 5)
	ev := r.second(20, 5, nil) // 5 of 20 failed: 25 % > 5 %
	r.want(resilience.ReleaseRolledBack, 0)
	if ev == nil || ev.By != "controller" || !strings.Contains(ev.Reason, "breached a gate: error rate above 5 %") || ev.CanaryWindow.Failures != 5 {
		t.Fatalf("breach: %+v", ev)
	}
	for range 5 {
		r.second(10, 0, nil)
	}
	r.want(resilience.ReleaseRolledBack, 0) // stays back until an operator acts
	r.second(0, 0, cmd("4", resilience.ReleasePromote))
	r.want(resilience.ReleasePromoted, 100)
	r.second(0, 0, cmd("5", resilience.ReleaseRollback))
	r.want(resilience.ReleaseRolledBack, 0)
	// A pause that does not apply (not running) changes nothing but is
	// spent.
	if ev := r.second(0, 0, cmd("6", resilience.ReleasePause)); ev != nil || r.st.Command != "6" {
		t.Fatalf("pause while rolled back: %+v %+v", ev, r.st)
	}
}

// A new canary (the entry names another channel) starts over, pending.
func TestReleaseNewCanaryStartsOver(t *testing.T) {
	r := newReleaseRun(t, resilience.ReleasePolicy{Steps: []float64{5}})
	r.second(0, 0, cmd("1", resilience.ReleaseStart))
	r.want(resilience.ReleaseRunning, 5)
	obs := func(time.Time) resilience.ChannelWindow { return resilience.ChannelWindow{} }
	st, ev := resilience.StepRelease(r.p, r.st, "v3", nil, obs, obs, nil, nil, r.now.Add(time.Second))
	if ev != nil || st.Stage != resilience.ReleasePending || st.Percent != 0 || st.Canary != "v3" {
		t.Fatalf("new canary: %+v %+v", st, ev)
	}
}

// The latency histogram's quantiles are bucket bounds.
func TestLatencyHistogram(t *testing.T) {
	var w resilience.ChannelWindow
	for range 98 {
		w.Latency[resilience.LatencyBucket(3*time.Millisecond)]++
	}
	w.Latency[resilience.LatencyBucket(150*time.Millisecond)]++
	w.Latency[resilience.LatencyBucket(2*time.Hour)]++
	if got := w.Latency.Quantile(0.5); got != 5*time.Millisecond {
		t.Fatalf("p50 %v", got)
	}
	if got := w.P99(); got != 200*time.Millisecond {
		t.Fatalf("p99 %v", got)
	}
	if got := w.Latency.Quantile(1); got != 2*time.Minute {
		t.Fatalf("max %v", got)
	}
	var o resilience.ChannelWindow
	o.Add(w)
	if o.Latency != w.Latency {
		t.Fatal("Add does not add the histogram")
	}
}
