package registry

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jetway-gw/jetway/expr"
	"github.com/jetway-gw/jetway/resilience"
)

// Channel is one of the backends that serve an API with a channel set
// (API.Channels, in place of API.Backend): a provider of a scenario, or
// the stable backend and its canary. The order of the list is the order
// of failover: a call that failed on one channel is tried on the next
// that serves its scenario.
type Channel struct {
	Name    string  `json:"name"`
	Backend Backend `json:"backend"`
	// Weight is the channel's share of the calls among the channels that
	// serve a call's scenario (default 1).
	Weight int `json:"weight,omitempty"`
	// Backup channels take calls only when no other channel of the
	// scenario is available, and the failover of failed calls.
	Backup bool `json:"backup,omitempty"`
	// Timeout of one call on the channel (default: the API's).
	Timeout Duration `json:"timeout,omitempty"`
	// Match says which scenarios the channel serves: for a dimension of
	// channel_policy.dimensions, the values it serves (absent: all).
	Match map[string][]string `json:"match,omitempty"`
}

// ChannelPolicy is how an API's channel set is judged and used; every
// field has a default.
type ChannelPolicy struct {
	// Threshold is the success rate (0..1) below which a channel is cut.
	Threshold float64 `json:"threshold,omitempty"`
	// Window is the sliding span success is measured over, and the
	// length of each ramp step.
	Window Duration `json:"window,omitempty"`
	// MinVolume is the calls a window must hold before a channel is
	// judged.
	MinVolume int `json:"min_volume,omitempty"`
	// Base is the first cut's length before probing (doubling with each
	// failed probe round or ramp step, up to MaxCut).
	Base   Duration `json:"base,omitempty"`
	MaxCut Duration `json:"max_cut,omitempty"`
	// Probes is the number of probe calls of a round.
	Probes int `json:"probes,omitempty"`
	// RampStart is the share a channel gets when its probes pass; it
	// doubles each window it passes.
	RampStart float64 `json:"ramp_start,omitempty"`
	// Probe is how a cut channel is probed: live (real calls, falling
	// back to a healthy channel when the probe fails; the default) or
	// shadow (copies of real calls, the answer discarded: read-only APIs)
	// or canned (the controller sends probe_requests itself, whatever
	// the traffic: a quiet channel is probed too).
	Probe string `json:"probe,omitempty"`
	// ProbeRequests are the saved calls a canned probe round sends (probe
	// canned), in turn: each answer is judged by the API's classify.
	ProbeRequests []ProbeRequest `json:"probe_requests,omitempty"`
	// Failover says which failed calls are tried on the next channel:
	// safe (the default: GET, HEAD and OPTIONS, and any call the
	// channel's breaker refused before sending), always, or never.
	Failover string `json:"failover,omitempty"`
	// Dimensions pick a call's scenario: each reads one value of the call.
	Dimensions []Dimension `json:"dimensions,omitempty"`
}

// ProbeRequest is a saved call a canned probe sends to a channel being
// probed, as a caller's call would reach it.
type ProbeRequest struct {
	Method  string            `json:"method,omitempty"` // default GET
	Path    string            `json:"path"`
	Query   string            `json:"query,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    string            `json:"body,omitempty"`
}

// maxProbeRequests bounds a policy's canned probes, maxProbeBody each body.
const (
	maxProbeRequests = 10
	maxProbeBody     = 64 << 10
)

// Dimension is one value of a call that selects channels: From is
// header:<name>, query:<name>, param:<name> (a route parameter) or app.
type Dimension struct {
	Name string `json:"name"`
	From string `json:"from"`
}

// Probe modes and failover choices of a ChannelPolicy.
const (
	ProbeLive       = "live"
	ProbeShadow     = "shadow"
	ProbeCanned     = "canned"
	FailoverSafe    = "safe"
	FailoverAlways  = "always"
	FailoverNever   = "never"
	MaxChannels     = 16
	maxDimensions   = 3
	maxMatchValues  = 32
	maxScenarios    = 1024
	anyScenarioPart = "*"
)

var channelName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// HasChannels reports whether the API is served by a channel set.
func (a *API) HasChannels() bool { return len(a.Channels) > 0 }

// Controller returns the controller's policy with its defaults.
func (p *ChannelPolicy) Controller() resilience.ChannelPolicy {
	if p == nil {
		return resilience.ChannelPolicy{}.WithDefaults()
	}
	return resilience.ChannelPolicy{
		Threshold: p.Threshold, Window: time.Duration(p.Window), MinVolume: p.MinVolume,
		Base: time.Duration(p.Base), MaxCut: time.Duration(p.MaxCut), Probes: p.Probes, RampStart: p.RampStart,
	}.WithDefaults()
}

// WithDefaults is the policy with every default filled in, in the
// entry's own terms (as `jetway channel show` and the admin API show
// it); p may be nil.
func (p *ChannelPolicy) WithDefaults() ChannelPolicy {
	c := p.Controller()
	out := ChannelPolicy{Threshold: c.Threshold, Window: Duration(c.Window), MinVolume: c.MinVolume,
		Base: Duration(c.Base), MaxCut: Duration(c.MaxCut), Probes: c.Probes, RampStart: c.RampStart,
		Probe: p.ProbeMode(), Failover: p.FailoverMode()}
	if p != nil {
		out.Dimensions, out.ProbeRequests = p.Dimensions, p.ProbeRequests
	}
	return out
}

// ProbeMode is Probe with its default.
func (p *ChannelPolicy) ProbeMode() string {
	if p == nil || p.Probe == "" {
		return ProbeLive
	}
	return p.Probe
}

// FailoverMode is Failover with its default.
func (p *ChannelPolicy) FailoverMode() string {
	if p == nil || p.Failover == "" {
		return FailoverSafe
	}
	return p.Failover
}

// WeightOrDefault is the channel's weight (1 when unset).
func (c *Channel) WeightOrDefault() int {
	if c.Weight <= 0 {
		return 1
	}
	return c.Weight
}

// Serves reports whether the channel serves a call whose dimensions have
// values vals (in the order of the policy's dimensions).
func (c *Channel) Serves(dims []Dimension, vals []string) bool {
	for i, d := range dims {
		if m, ok := c.Match[d.Name]; ok && (i >= len(vals) || !slices.Contains(m, vals[i])) {
			return false
		}
	}
	return true
}

// ChannelSpecs are the channels as the controller sees them: each with
// the scenarios it serves, a scenario being one value per dimension
// (a value no channel names stands as "*", served by the channels that
// match every value).
func (a *API) ChannelSpecs() []resilience.ChannelSpec {
	var dims []Dimension
	if a.ChannelPolicy != nil {
		dims = a.ChannelPolicy.Dimensions
	}
	// The values each dimension can take that make a difference.
	values := make([][]string, len(dims))
	for i, d := range dims {
		for _, c := range a.Channels {
			for _, v := range c.Match[d.Name] {
				if !slices.Contains(values[i], v) {
					values[i] = append(values[i], v)
				}
			}
		}
		values[i] = append(values[i], anyScenarioPart)
	}
	out := make([]resilience.ChannelSpec, 0, len(a.Channels))
	for _, c := range a.Channels {
		spec := resilience.ChannelSpec{Name: c.Name}
		if r := a.Release; r != nil && (r.Shadow == c.Name || r.Canary == c.Name) {
			// A release's shadow serves no caller and its canary only
			// the calls the release sends it: neither covers a scenario
			// of the others (the stable is never cut for a canary that
			// could not take its calls), and nothing covers theirs (the
			// canary answers to the release's gates, not to a cut).
			spec.Serves = []string{"release:" + c.Name}
			out = append(out, spec)
			continue
		}
		var walk func(i int, key []string)
		walk = func(i int, key []string) {
			if i == len(dims) {
				spec.Serves = append(spec.Serves, strings.Join(key, ","))
				return
			}
			m, limited := c.Match[dims[i].Name]
			for _, v := range values[i] {
				if !limited || slices.Contains(m, v) {
					walk(i+1, append(key, dims[i].Name+"="+v))
				}
			}
		}
		walk(0, nil)
		out = append(out, spec)
	}
	return out
}

// scenarioCount is the number of scenarios the dimensions make.
func (a *API) scenarioCount() int {
	n := 1
	for _, d := range a.ChannelPolicy.Dimensions {
		vals := map[string]bool{}
		for _, c := range a.Channels {
			for _, v := range c.Match[d.Name] {
				vals[v] = true
			}
		}
		n *= len(vals) + 1
	}
	return n
}

func (a *API) checkChannels(params []string, catchAll bool, add func(path, format string, args ...any)) {
	hasBackend := a.Backend.Type != "" || a.Backend.URL != ""
	switch {
	case len(a.Channels) == 0 && !hasBackend:
		if a.ChannelPolicy != nil {
			add("channels", "channel_policy needs channels")
		} else {
			add("backend", "is required (or channels, for a set of backends)")
		}
		return
	case len(a.Channels) == 0:
		if a.ChannelPolicy != nil {
			add("channel_policy", "applies to channels only: this API has one backend")
		}
		checkBackend("backend", &a.Backend, params, catchAll, add)
		return
	case hasBackend:
		add("backend", "must not be given with channels: each channel has its own backend")
	}
	if len(a.Channels) > MaxChannels {
		add("channels", "at most %d channels", MaxChannels)
	}
	p := a.ChannelPolicy
	dims := map[string]bool{}
	if p != nil {
		if len(p.Dimensions) > maxDimensions {
			add("channel_policy.dimensions", "at most %d dimensions", maxDimensions)
		}
		for i, d := range p.Dimensions {
			path := fmt.Sprintf("channel_policy.dimensions[%d]", i)
			if !channelName.MatchString(d.Name) {
				add(path+".name", "must be lower-case letters, digits, '_' or '-' (at most 63)")
			} else if dims[d.Name] {
				add(path+".name", "%q is named twice", d.Name)
			}
			dims[d.Name] = true
			if err := checkDimensionSource(d.From, params); err != nil {
				add(path+".from", "%v", err)
			}
		}
		if p.Threshold < 0 || p.Threshold > 1 {
			add("channel_policy.threshold", "must be between 0 and 1")
		}
		if p.RampStart < 0 || p.RampStart > 1 {
			add("channel_policy.ramp_start", "must be between 0 and 1")
		}
		if p.MinVolume < 0 || p.MinVolume > 1_000_000 {
			add("channel_policy.min_volume", "must be between 0 and 1000000")
		}
		if p.Probes < 0 || p.Probes > 1000 {
			add("channel_policy.probes", "must be between 0 and 1000")
		}
		if w := time.Duration(p.Window); w != 0 && (w < time.Second || w > time.Hour) {
			add("channel_policy.window", "must be between 1s and 1h (whole seconds: outcomes are counted per second)")
		}
		for path, d := range map[string]Duration{"channel_policy.base": p.Base, "channel_policy.max_cut": p.MaxCut} {
			if d < 0 || time.Duration(d) > 7*24*time.Hour || (d != 0 && time.Duration(d) < time.Second) {
				add(path, "must be between 1s and 168h")
			}
		}
		if !slices.Contains([]string{"", ProbeLive, ProbeShadow, ProbeCanned}, p.Probe) {
			add("channel_policy.probe", "must be %s, %s or %s", ProbeLive, ProbeShadow, ProbeCanned)
		}
		switch {
		case p.Probe == ProbeCanned && len(p.ProbeRequests) == 0:
			add("channel_policy.probe_requests", "canned probes need at least one saved request")
		case p.Probe != ProbeCanned && len(p.ProbeRequests) > 0:
			add("channel_policy.probe_requests", "are sent by canned probes only (probe: canned)")
		case len(p.ProbeRequests) > maxProbeRequests:
			add("channel_policy.probe_requests", "at most %d", maxProbeRequests)
		}
		for i, pr := range p.ProbeRequests {
			path := fmt.Sprintf("channel_policy.probe_requests[%d]", i)
			if !strings.HasPrefix(pr.Path, "/") || strings.ContainsAny(pr.Path, " ?#\r\n") {
				add(path+".path", "must be an absolute path without query or spaces")
			}
			if len(pr.Body) > maxProbeBody {
				add(path+".body", "at most %d bytes", maxProbeBody)
			}
			checkSavedRequest(path, pr.Method, pr.Headers, add)
		}
		if !slices.Contains([]string{"", FailoverSafe, FailoverAlways, FailoverNever}, p.Failover) {
			add("channel_policy.failover", "must be %s, %s or %s", FailoverSafe, FailoverAlways, FailoverNever)
		}
	}
	names := map[string]bool{}
	primaries := 0
	for i, c := range a.Channels {
		path := fmt.Sprintf("channels[%d]", i)
		if !channelName.MatchString(c.Name) {
			add(path+".name", "must be lower-case letters, digits, '_' or '-' (at most 63)")
		} else if names[c.Name] {
			add(path+".name", "%q is named twice", c.Name)
		} else if c.Name == "other" {
			add(path+".name", `"other" is reserved: the edge's metrics count a channel no entry lists as other`)
		}
		names[c.Name] = true
		if c.Weight < 0 || c.Weight > 10_000 {
			add(path+".weight", "must be between 0 and 10000")
		}
		if !c.Backup {
			primaries++
		}
		checkTimeout(path+".timeout", c.Timeout, add)
		checkBackend(path+".backend", &c.Backend, params, catchAll, add)
		for dim, vals := range c.Match {
			if !dims[dim] {
				add(path+".match."+dim, "is not a dimension of channel_policy.dimensions")
			}
			if len(vals) == 0 || len(vals) > maxMatchValues {
				add(path+".match."+dim, "must list 1 to %d values", maxMatchValues)
			}
			for _, v := range vals {
				if v == "" || v == anyScenarioPart || len(v) > 128 || strings.ContainsAny(v, ",=") {
					add(path+".match."+dim, "%q is not a value: 1 to 128 characters, no ',', '=' or a lone '*'", v)
				}
			}
		}
	}
	if primaries == 0 {
		add("channels", "at least one channel must not be a backup")
	}
	if a.ChannelPolicy != nil && len(a.ChannelPolicy.Dimensions) <= maxDimensions && a.scenarioCount() > maxScenarios {
		add("channels", "the dimensions' values make more than %d scenarios", maxScenarios)
	}
}

// checkDimensionSource checks a dimension's from: header:<name>,
// query:<name>, param:<route parameter> or app.
func checkDimensionSource(from string, params []string) error {
	kind, name, _ := strings.Cut(from, ":")
	switch kind {
	case "app":
		if name != "" {
			return fmt.Errorf("app takes no name")
		}
		return nil
	case "header":
		if !validHeaderName(name) {
			return fmt.Errorf("header:%s is not a header name", name)
		}
		return nil
	case "query":
		if name == "" {
			return fmt.Errorf("query: needs a parameter name")
		}
		return nil
	case "param":
		if !slices.Contains(params, name) {
			return fmt.Errorf("%q is not a parameter of the route path", name)
		}
		return nil
	}
	return fmt.Errorf("must be header:<name>, query:<name>, param:<name> or app (got %q)", from)
}

// Release is a gray release over an API's channels: Canary takes a
// percent of the calls, raised step by step by the controller while the
// gates pass, set to 0 when one breaches (resilience.StepRelease).
type Release struct {
	Canary string `json:"canary"`
	// Sticky keeps a caller on one side: app, client_ip or
	// header:<name> (hashed); empty: each call drawn at random.
	Sticky string `json:"sticky,omitempty"`
	// Match, a CEL condition on the call (package expr), limits the
	// canary to the calls it holds for.
	Match string `json:"match,omitempty"`
	// Always and Never are apps that always (even before the release
	// starts) or never get the canary.
	Always []string `json:"always,omitempty"`
	Never  []string `json:"never,omitempty"`
	// Steps are the percents, rising, in (0, 100]; without them Start
	// (default 1) doubles each window.
	Steps    []float64 `json:"steps,omitempty"`
	Start    float64   `json:"start,omitempty"`
	Window   Duration  `json:"window,omitempty"`
	MinCalls int       `json:"min_calls,omitempty"`
	Gates    *Gates    `json:"gates,omitempty"`
	// Shadow is a channel that gets copies of the calls (ShadowPercent,
	// default 100), its answers discarded: its status differences and
	// latency show in its figures. It never serves a caller.
	Shadow        string   `json:"shadow,omitempty"`
	ShadowPercent *float64 `json:"shadow_percent,omitempty"`
}

// ShadowShare is the share (0..1) of the calls copied to the shadow
// (all of them when shadow_percent is absent).
func (r *Release) ShadowShare() float64 {
	if r.ShadowPercent == nil {
		return 1
	}
	return *r.ShadowPercent / 100
}

// Gates are what a release step must not breach; any one breached rolls
// the canary back to 0.
type Gates struct {
	// MaxErrorRate is the most of the canary's calls that may fail
	// (default 0.05, when no gate is set).
	MaxErrorRate float64 `json:"max_error_rate,omitempty"`
	// MaxP99 is the most the canary's 99th percentile latency may be.
	MaxP99 Duration `json:"max_p99,omitempty"`
	// When, a CEL condition on the step's figures (expr.CompileGate:
	// canary.error_rate, stable.p99_ms, shadow.mismatches, ...), breaches
	// when it holds.
	When string `json:"when,omitempty"`
}

// DefaultMaxErrorRate is a release's gate when it sets none.
const DefaultMaxErrorRate = 0.05

// Policy is the release's resilience.ReleasePolicy.
func (r *Release) Policy() resilience.ReleasePolicy {
	return resilience.ReleasePolicy{Steps: r.Steps, Start: r.Start, Window: time.Duration(r.Window), MinCalls: r.MinCalls}.WithDefaults()
}

// Gate builds the release's gate (nil error: the gates compiled at publish).
func (r *Release) Gate() (resilience.ReleaseGate, error) {
	g := r.Gates
	if g == nil {
		g = &Gates{}
	}
	maxErr := g.MaxErrorRate
	if maxErr == 0 && g.MaxP99 == 0 && g.When == "" {
		maxErr = DefaultMaxErrorRate
	}
	var cond *expr.Gate
	if g.When != "" {
		var err error
		if cond, err = expr.CompileGate(g.When); err != nil {
			return nil, err
		}
	}
	maxP99 := time.Duration(g.MaxP99)
	return func(canary, stable, shadow resilience.ChannelWindow) (bool, string) {
		if maxErr > 0 && canary.ErrorRate() > maxErr {
			return true, fmt.Sprintf("error rate %.2f %% > %.2f %% (%d of %d calls failed)", 100*canary.ErrorRate(), 100*maxErr, canary.Failures, canary.Calls)
		}
		if maxP99 > 0 && canary.P99() > maxP99 {
			return true, fmt.Sprintf("p99 %v > %v over %d calls", canary.P99(), maxP99, canary.Calls)
		}
		if cond != nil {
			breach, err := cond.Eval(gateFigures(canary), gateFigures(stable), gateFigures(shadow))
			if err != nil {
				return true, fmt.Sprintf("gate %q could not run: %v", cond, err)
			}
			if breach {
				return true, fmt.Sprintf("gate %q holds", cond)
			}
		}
		return false, ""
	}, nil
}

// gateFigures are a window's figures as a gate condition reads them.
func gateFigures(w resilience.ChannelWindow) map[string]float64 {
	mean := 0.0
	if w.Calls > 0 {
		mean = float64(w.LatencySum) / float64(w.Calls) / float64(time.Millisecond)
	}
	return map[string]float64{
		"calls": float64(w.Calls), "failures": float64(w.Failures), "error_rate": w.ErrorRate(),
		"p99_ms": float64(w.P99()) / float64(time.Millisecond), "mean_ms": mean, "mismatches": float64(w.Mismatches),
	}
}

func (a *API) checkRelease(add func(path, format string, args ...any)) {
	r := a.Release
	if r == nil {
		return
	}
	if len(a.Channels) == 0 {
		add("release", "needs channels: the canary is one of them")
		return
	}
	has := func(name string) bool {
		return slices.ContainsFunc(a.Channels, func(c Channel) bool { return c.Name == name })
	}
	if !has(r.Canary) {
		add("release.canary", "%q is not a channel of the api", r.Canary)
	}
	if r.Shadow != "" {
		if !has(r.Shadow) {
			add("release.shadow", "%q is not a channel of the api", r.Shadow)
		} else if r.Shadow == r.Canary {
			add("release.shadow", "must not be the canary")
		}
	}
	if len(a.Channels)-1-min(len(r.Shadow), 1) < 1 {
		add("release", "needs a channel besides the canary and the shadow to serve the rest of the calls")
	}
	if p := r.ShadowPercent; p != nil && (*p < 0 || *p > 100) {
		add("release.shadow_percent", "must be between 0 and 100")
	}
	kind, name, _ := strings.Cut(r.Sticky, ":")
	switch {
	case r.Sticky == "" || r.Sticky == "app" || r.Sticky == "client_ip":
	case kind == "header" && validHeaderName(name):
	default:
		add("release.sticky", "must be app, client_ip or header:<name>")
	}
	if r.Match != "" {
		if _, err := expr.Compile(r.Match); err != nil {
			add("release.match", "%v", err)
		}
	}
	last := 0.0
	for i, s := range r.Steps {
		if s <= last || s > 100 {
			add(fmt.Sprintf("release.steps[%d]", i), "must rise, each in (0, 100]")
			break
		}
		last = s
	}
	if r.Start < 0 || r.Start > 100 {
		add("release.start", "must be in (0, 100]")
	}
	if w := time.Duration(r.Window); w != 0 && (w < time.Second || w > 24*time.Hour) {
		add("release.window", "must be between 1s and 24h")
	}
	if r.MinCalls < 0 {
		add("release.min_calls", "must not be negative")
	}
	if g := r.Gates; g != nil {
		if g.MaxErrorRate < 0 || g.MaxErrorRate > 1 {
			add("release.gates.max_error_rate", "must be between 0 and 1")
		}
		if g.MaxP99 < 0 {
			add("release.gates.max_p99", "must not be negative")
		}
		if g.When != "" {
			if _, err := expr.CompileGate(g.When); err != nil {
				add("release.gates.when", "%v", err)
			}
		}
	}
}
