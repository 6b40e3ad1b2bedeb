package registry

import (
	"cmp"

	"github.com/jetway-gw/jetway/bus"
)

// DefaultSandboxPool serves sandbox tiers that name no pool of their own.
const DefaultSandboxPool = "sandbox"

// Sandbox is an API's sandbox tier. The calls of apps marked sandbox go to
// it, and never to the production backend: on their own subject
// (jetway.sandbox.<api>), served by their own pool, limited by their own
// rules, and counted in their own metrics (<api>@sandbox). Production
// governance (breaker, retry, fallback, degrade switch, edge_concurrency)
// does not apply to them: a sandbox backend failing or flooded never trips
// or throttles the production API, and the other way round.
type Sandbox struct {
	Pool        string      `json:"pool,omitempty"`
	Backend     Backend     `json:"backend"`
	Timeout     Duration    `json:"timeout,omitempty"`
	Concurrency int         `json:"concurrency,omitempty"`
	RateLimits  []RateLimit `json:"rate_limits,omitempty"`
	// Validate replaces the API's request validation for sandbox calls
	// (a new schema is tried here before production gets it).
	Validate *Validate `json:"validate,omitempty"`
	// Cache replaces the API's response cache for sandbox calls; the two
	// tiers never share cached answers.
	Cache *Cache `json:"cache,omitempty"`
	// Rewrite replaces the API's rewrites for sandbox calls.
	Rewrite *Rewrite `json:"rewrite,omitempty"`
}

// SandboxAPI is the API as its sandbox tier serves it (nil when the API
// has none): the same route, auth and IP rules, with the sandbox's pool,
// backend, limits and timeout. Build it once per snapshot; it is as
// immutable as the API.
func (a *API) SandboxAPI() *API {
	sb := a.Sandbox
	if sb == nil || a.draft { // a draft is served to sandbox apps as it is
		return nil
	}
	return &API{
		Name:        a.Name,
		Pool:        sb.Pool,
		Description: a.Description,
		Owner:       a.Owner,
		Route:       a.Route,
		Backend:     sb.Backend,
		Timeout:     sb.Timeout,
		Concurrency: sb.Concurrency,
		MaxBody:     a.MaxBody,
		RateLimits:  sb.RateLimits,
		Validate:    cmp.Or(sb.Validate, a.Validate),
		Cache:       cmp.Or(sb.Cache, a.Cache),
		Rewrite:     cmp.Or(sb.Rewrite, a.Rewrite),
		Classify:    a.Classify, // one definition of failure for both tiers
		Async:       a.Async,
		IPRules:     a.IPRules,
		Auth:        a.Auth,
		Revision:    a.Revision,
		sandbox:     true,
	}
}

// IsSandbox reports whether a is the sandbox tier of an API (SandboxAPI).
func (a *API) IsSandbox() bool { return a.sandbox }

// Key names the tier of the API that a is: its name, "<name>@sandbox", or
// "<name>@draft" for its draft. Metrics, limiter state and worker
// subscriptions are kept per key, so the tiers never share them ('@' is
// not allowed in API names).
func (a *API) Key() string {
	if a.draft {
		return a.Name + "@draft"
	}
	if a.sandbox {
		return a.Name + "@sandbox"
	}
	return a.Name
}

// Subject is the NATS subject the API's requests travel on:
// jetway.api.<pool>.<name>, or jetway.sandbox.<sandbox pool>.<name> for the
// sandbox tier (see bus.APISubject), or jetway.sandbox.<pool>.draft.<name>
// for its draft: drafts travel in the sandbox subject space, which no
// production call uses.
func (a *API) Subject() string {
	if a.draft {
		return bus.SandboxSubject(a.Pool, DraftPrefix+a.Name)
	}
	if a.sandbox {
		return bus.SandboxSubject(a.Pool, a.Name)
	}
	return bus.APISubject(a.Pool, a.Name)
}

func (sb *Sandbox) applyDefaults(a *API) {
	if sb.Pool == "" {
		sb.Pool = DefaultSandboxPool
	}
	if sb.Timeout == 0 {
		sb.Timeout = a.Timeout
	}
	if sb.Concurrency == 0 {
		sb.Concurrency = DefaultConcurrency
	}
	sb.Backend.applyDefaults()
	if sb.Cache != nil {
		sb.Cache.applyDefaults()
	}
}

// check adds the sandbox's problems; params and catchAll describe the
// API's route path (a sandbox http backend takes the same placeholders).
func (sb *Sandbox) check(params []string, catchAll bool, add func(path, format string, args ...any)) {
	if sb.Pool != "" {
		if err := bus.ValidName(sb.Pool); err != nil {
			add("sandbox.pool", "%v", err)
		}
	}
	checkTimeout("sandbox.timeout", sb.Timeout, add)
	checkBackend("sandbox.backend", &sb.Backend, params, catchAll, add)
	prefixed := func(path, format string, args ...any) { add("sandbox."+path, format, args...) }
	(&API{Name: "sandbox", RateLimits: sb.RateLimits}).checkPolicies(params, prefixed)
	sb.Validate.check("sandbox.validate", add)
	sb.Cache.check("sandbox.cache", add)
	sb.Rewrite.check("sandbox.rewrite", params, catchAll, add)
}
