package registry

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

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
	// shadow (copies of real calls, the answer discarded: read-only APIs).
	Probe string `json:"probe,omitempty"`
	// Failover says which failed calls are tried on the next channel:
	// safe (idempotent calls: GET, HEAD, OPTIONS, PUT, DELETE, or one
	// with an Idempotency-Key; the default), always, or never.
	Failover string `json:"failover,omitempty"`
	// Dimensions pick a call's scenario: each reads one value of the call.
	Dimensions []Dimension `json:"dimensions,omitempty"`
}

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
		if !slices.Contains([]string{"", ProbeLive, ProbeShadow}, p.Probe) {
			add("channel_policy.probe", "must be %s or %s", ProbeLive, ProbeShadow)
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
