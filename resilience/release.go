package resilience

import (
	"fmt"
	"time"
)

// Gray release: one channel of an API's set is the canary, which takes a
// percent of the calls; the controller raises the percent step by step,
// each step after a window whose calls passed the release's gates, and
// sets it to 0 when a step breaches one. StepRelease is that logic, a
// pure function of its inputs like StepChannels; the same elected
// controller runs both.
//
//	pending ──start──> running ──gates pass each window──> … 100 % ──> promoted
//	                      │  ^                                         ^
//	                 pause│  │resume          promote (operator) ──────┘
//	                      v  │
//	                    paused            a breach, or rollback ──> rolled_back (0 %)

// ReleaseStage is where a release is.
type ReleaseStage string

// The stages of a release.
const (
	ReleasePending    ReleaseStage = "pending"     // defined, not started: 0 % (always-apps only)
	ReleaseRunning    ReleaseStage = "running"     // the percent rises each window the gates pass
	ReleasePaused     ReleaseStage = "paused"      // the percent holds
	ReleasePromoted   ReleaseStage = "promoted"    // 100 %: the canary serves every call it may
	ReleaseRolledBack ReleaseStage = "rolled_back" // 0 %, by a breach or an operator
)

// Release commands an operator sends (ReleaseCommand.Action).
const (
	ReleaseStart    = "start"
	ReleasePause    = "pause"
	ReleaseResume   = "resume"
	ReleasePromote  = "promote"
	ReleaseRollback = "rollback"
)

// ReleaseActions are the commands a release takes, in that order.
var ReleaseActions = []string{ReleaseStart, ReleasePause, ReleaseResume, ReleasePromote, ReleaseRollback}

// Defaults of a ReleasePolicy.
const (
	DefaultReleaseStart    = 1.0 // percent
	DefaultReleaseWindow   = time.Minute
	DefaultReleaseMinCalls = 20
)

// ReleasePolicy is how a release moves.
type ReleasePolicy struct {
	// Steps are the percents (0, 100], rising, the canary goes through;
	// empty: Start, then doubling up to 100.
	Steps []float64
	Start float64
	// Window is how long each step lasts before it is judged.
	Window time.Duration
	// MinCalls is the canary calls a step needs to be judged: a quiet
	// step waits.
	MinCalls int
}

// WithDefaults returns p with its zero fields set.
func (p ReleasePolicy) WithDefaults() ReleasePolicy {
	if p.Start <= 0 {
		p.Start = DefaultReleaseStart
	}
	if p.Window <= 0 {
		p.Window = DefaultReleaseWindow
	}
	if p.MinCalls <= 0 {
		p.MinCalls = DefaultReleaseMinCalls
	}
	return p
}

// percent is the percent of step i, and whether the step exists.
func (p ReleasePolicy) percent(i int) (float64, bool) {
	if len(p.Steps) > 0 {
		if i < len(p.Steps) {
			return min(p.Steps[i], 100), true
		}
		return 100, false
	}
	pc := p.Start
	for range i {
		if pc >= 100 {
			return 100, false
		}
		pc *= 2
	}
	return min(pc, 100), true
}

// ReleaseState is a release as the controller stores it.
type ReleaseState struct {
	Canary  string       `json:"canary"`
	Stage   ReleaseStage `json:"stage"`
	Percent float64      `json:"percent"`
	Step    int          `json:"step"`
	Since   time.Time    `json:"since"`
	Reason  string       `json:"reason,omitempty"`
	// Command is the id of the last operator command applied: each is
	// applied once.
	Command string `json:"command,omitempty"`
}

// ReleaseCommand is an operator's command to a release.
type ReleaseCommand struct {
	ID     string    `json:"id"`
	Action string    `json:"action"`
	By     string    `json:"by"`
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
}

// ReleaseEvent is one change of a release, for the history and alerts.
type ReleaseEvent struct {
	Canary  string       `json:"canary"`
	From    ReleaseStage `json:"from"`
	To      ReleaseStage `json:"to"`
	Percent float64      `json:"percent"`
	By      string       `json:"by"` // controller or manual
	Reason  string       `json:"reason"`
	At      time.Time    `json:"at"`
	// The step's figures that decided: the canary's and the rest's.
	CanaryWindow ChannelWindow `json:"canary_window"`
	StableWindow ChannelWindow `json:"stable_window"`
}

// ReleaseGate judges a step's figures — the canary's, the other
// channels', and the shadow's (zero without one: its mismatches count
// the copies whose status differed) — breach says the canary must go back
// to 0, and why.
type ReleaseGate func(canary, stable, shadow ChannelWindow) (breach bool, why string)

// StepRelease moves a release one step at now. canary is the entry's
// canary channel (a state for another canary starts over, pending); cmd
// the operator's last command (nil for none; applied once, by ID);
// canaryObs, stableObs and shadowObs the canary's, the other channels'
// and the shadow's outcomes from since to now (shadowObs nil without a
// shadow); gate the release's gates. It returns the new state
// and the change made (nil for none).
func StepRelease(p ReleasePolicy, cur ReleaseState, canary string, cmd *ReleaseCommand,
	canaryObs, stableObs, shadowObs func(since time.Time) ChannelWindow, gate ReleaseGate, now time.Time) (ReleaseState, *ReleaseEvent) {
	p = p.WithDefaults()
	if shadowObs == nil {
		shadowObs = func(time.Time) ChannelWindow { return ChannelWindow{} }
	}
	if cur.Canary != canary || cur.Stage == "" {
		cur = ReleaseState{Canary: canary, Stage: ReleasePending, Since: now, Command: cur.Command}
	}
	next := cur
	change := func(to ReleaseStage, pc float64, by, reason string) *ReleaseEvent {
		ev := &ReleaseEvent{Canary: canary, From: cur.Stage, To: to, Percent: pc, By: by, Reason: reason, At: now,
			CanaryWindow: canaryObs(cur.Since), StableWindow: stableObs(cur.Since)}
		next.Stage, next.Percent, next.Since, next.Reason = to, pc, now, reason
		return ev
	}
	if cmd != nil && cmd.ID != "" && cmd.ID != cur.Command {
		next.Command = cmd.ID
		by := "manual"
		why := func(what string) string {
			if cmd.Reason != "" {
				return what + " by " + cmd.By + ": " + cmd.Reason
			}
			return what + " by " + cmd.By
		}
		switch cmd.Action {
		case ReleaseStart:
			first, _ := p.percent(0)
			next.Step = 0
			return next, change(ReleaseRunning, first, by, why("started"))
		case ReleasePause:
			if cur.Stage == ReleaseRunning {
				return next, change(ReleasePaused, cur.Percent, by, why("paused"))
			}
		case ReleaseResume:
			if cur.Stage == ReleasePaused {
				return next, change(ReleaseRunning, cur.Percent, by, why("resumed"))
			}
		case ReleasePromote:
			return next, change(ReleasePromoted, 100, by, why("promoted"))
		case ReleaseRollback:
			return next, change(ReleaseRolledBack, 0, by, why("rolled back"))
		}
		return next, nil // a command that does not apply in this stage
	}
	if cur.Stage != ReleaseRunning {
		return next, nil
	}
	cw, sw := canaryObs(cur.Since), stableObs(cur.Since)
	if cw.Calls >= p.MinCalls && gate != nil {
		if breach, why := gate(cw, sw, shadowObs(cur.Since)); breach {
			return next, change(ReleaseRolledBack, 0, "controller", fmt.Sprintf("step %d (%.4g %%) breached a gate: %s", cur.Step+1, cur.Percent, why))
		}
	}
	if now.Sub(cur.Since) < p.Window || cw.Calls < p.MinCalls {
		return next, nil
	}
	pc, ok := p.percent(cur.Step + 1)
	if !ok || cur.Percent >= 100 {
		return next, change(ReleasePromoted, 100, "controller", fmt.Sprintf("every step passed its gates (last: %d calls, %.2f %% failed, p99 %v)", cw.Calls, 100*cw.ErrorRate(), cw.P99()))
	}
	next.Step = cur.Step + 1
	return next, change(ReleaseRunning, pc, "controller", fmt.Sprintf("step %d passed its gates (%d calls, %.2f %% failed, p99 %v): %.4g %%", cur.Step+1, cw.Calls, 100*cw.ErrorRate(), cw.P99(), pc))
}
