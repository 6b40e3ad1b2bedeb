package registry

import (
	"fmt"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/resilience"
)

// RateLimit is one rate-limit rule of an API, enforced at the edge. Key
// says what the limit counts by; the other fields map 1:1 to
// resilience.RuleConfig.
type RateLimit struct {
	// Name identifies the rule in logs, metrics and 429 messages.
	// Default "rule<N>" by position.
	Name string `json:"name,omitempty"`
	// Key parts: "api" (default: the whole API), "app", "ip", "header:<Name>",
	// "query:<name>", "param:<route parameter>". Several parts limit each
	// combination of values (["app", "header:X-Region"]).
	Key        []string       `json:"key,omitempty"`
	Behavior   string         `json:"behavior,omitempty"`
	Limit      int            `json:"limit"`
	Window     Duration       `json:"window,omitempty"`
	Buckets    int            `json:"buckets,omitempty"`
	ColdFactor float64        `json:"cold_factor,omitempty"`
	WarmUp     Duration       `json:"warm_up,omitempty"`
	MaxQueue   Duration       `json:"max_queue,omitempty"`
	MaxKeys    int            `json:"max_keys,omitempty"`
	Exceptions map[string]int `json:"exceptions,omitempty"`
	// Scope is "edge" (default: each edge enforces the limit on its own)
	// or "cluster" (the total across all live edges stays within it).
	Scope string `json:"scope,omitempty"`
}

// Rate-limit scopes.
const (
	ScopeEdge    = "edge"
	ScopeCluster = "cluster"
)

// Cluster reports whether the rule's limit is shared by all edges.
func (r *RateLimit) Cluster() bool { return r.Scope == ScopeCluster }

// Keyed reports whether the rule limits each key value on its own (any key
// part other than "api").
func (r *RateLimit) Keyed() bool {
	for _, k := range r.Key {
		if k != "api" {
			return true
		}
	}
	return false
}

// Rule is the limiter configuration of the rule.
func (r *RateLimit) Rule() resilience.RuleConfig {
	c := resilience.RuleConfig{
		Behavior:   r.Behavior,
		Limit:      r.Limit,
		Window:     time.Duration(r.Window),
		Buckets:    r.Buckets,
		ColdFactor: r.ColdFactor,
		WarmUp:     time.Duration(r.WarmUp),
		MaxQueue:   time.Duration(r.MaxQueue),
	}
	if r.Keyed() {
		c.MaxKeys, c.Exceptions = r.MaxKeys, r.Exceptions
	}
	return c
}

// Breaker configures the circuit breaker a worker keeps for the API's
// backend; the fields map 1:1 to resilience.BreakerConfig. Shared (default
// true) makes every worker of the pool act on a breaker that one of them
// opened or closed, through NATS.
type Breaker struct {
	ConsecutiveFailures int      `json:"consecutive_failures,omitempty"`
	ConsecutiveSlow     int      `json:"consecutive_slow,omitempty"`
	SlowCall            Duration `json:"slow_call,omitempty"`
	FailureRatio        float64  `json:"failure_ratio,omitempty"`
	SlowRatio           float64  `json:"slow_ratio,omitempty"`
	Window              Duration `json:"window,omitempty"`
	MinCalls            int      `json:"min_calls,omitempty"`
	OpenFor             Duration `json:"open_for,omitempty"`
	MaxOpenFor          Duration `json:"max_open_for,omitempty"`
	HalfOpenProbes      int      `json:"half_open_probes,omitempty"`
	SlowStart           Duration `json:"slow_start,omitempty"`
	SlowStartFrom       float64  `json:"slow_start_from,omitempty"`
	Shared              *bool    `json:"shared,omitempty"`
}

// Config is the resilience configuration of the breaker.
func (b *Breaker) Config() resilience.BreakerConfig {
	return resilience.BreakerConfig{
		ConsecutiveFailures: b.ConsecutiveFailures,
		ConsecutiveSlow:     b.ConsecutiveSlow,
		SlowCall:            time.Duration(b.SlowCall),
		FailureRatio:        b.FailureRatio,
		SlowRatio:           b.SlowRatio,
		Window:              time.Duration(b.Window),
		MinCalls:            b.MinCalls,
		OpenFor:             time.Duration(b.OpenFor),
		MaxOpenFor:          time.Duration(b.MaxOpenFor),
		HalfOpenProbes:      b.HalfOpenProbes,
		SlowStart:           time.Duration(b.SlowStart),
		SlowStartFrom:       b.SlowStartFrom,
	}
}

// IsShared reports whether breaker changes are shared across the pool.
func (b *Breaker) IsShared() bool { return b.Shared == nil || *b.Shared }

// Retry conditions.
const (
	RetryOnTimeout = "timeout" // the attempt's own timeout passed
	RetryOnConnect = "connect" // the backend could not be reached
	RetryOn5xx     = "5xx"     // the backend answered 500-599
)

// Retry is the API's retry policy, applied by the worker within the
// call's deadline. Only idempotent methods are retried, unless the request
// carries an Idempotency-Key header.
type Retry struct {
	// Attempts in all, the first included: 2 to 10.
	Attempts int `json:"attempts"`
	// On lists what is retried: "timeout", "connect", "5xx". Default
	// ["connect", "timeout"].
	On []string `json:"on,omitempty"`
	// Backoff is the base of the full-jitter exponential backoff (default
	// 25ms), MaxBackoff its cap (default 250ms).
	Backoff    Duration `json:"backoff,omitempty"`
	MaxBackoff Duration `json:"max_backoff,omitempty"`
	// AttemptTimeout bounds one attempt (default: the API's timeout); each
	// attempt gets min(remaining deadline, AttemptTimeout).
	AttemptTimeout Duration `json:"attempt_timeout,omitempty"`
	// MinAttempt is the timeout floor: no attempt starts with less of the
	// deadline left (default 10ms).
	MinAttempt Duration `json:"min_attempt,omitempty"`
	// Budget limits retries to a share of the API's calls (ratio, default
	// 0.10) plus a floor per second, over a sliding window: a failing
	// backend never sees a retry storm.
	Budget *RetryBudget `json:"budget,omitempty"`
}

// RetryBudget maps 1:1 to resilience.RetryBudgetConfig.
type RetryBudget struct {
	Ratio        float64  `json:"ratio,omitempty"`
	MinPerSecond float64  `json:"min_per_second,omitempty"`
	Window       Duration `json:"window,omitempty"`
}

// BudgetConfig is the resilience configuration of the retry budget.
func (r *Retry) BudgetConfig() resilience.RetryBudgetConfig {
	if r.Budget == nil {
		return resilience.RetryBudgetConfig{}
	}
	return resilience.RetryBudgetConfig{Ratio: r.Budget.Ratio, MinPerSecond: r.Budget.MinPerSecond, Window: time.Duration(r.Budget.Window)}
}

// Retries reports whether the policy retries on cond.
func (r *Retry) Retries(cond string) bool {
	if len(r.On) == 0 {
		return cond == RetryOnConnect || cond == RetryOnTimeout
	}
	for _, c := range r.On {
		if c == cond {
			return true
		}
	}
	return false
}

// Fallback conditions.
const (
	FallbackOnTimeout     = "timeout"      // 504 GATEWAY_TIMEOUT
	FallbackOn5xx         = "5xx"          // the backend answered 500-599, or 502 BAD_GATEWAY
	FallbackOnCircuitOpen = "circuit_open" // 503 CIRCUIT_OPEN
)

// Fallback is what a worker answers instead of a failure: tried in order —
// another API, then the last good response to the same request, then a
// static response — each optional, all within the original deadline.
type Fallback struct {
	// On lists the failures that fall back; default all three.
	On []string `json:"on,omitempty"`
	// API is another API (any pool) to call with the same request.
	API string `json:"api,omitempty"`
	// Cached answers with the last good (2xx) response this worker gave to
	// the same method, path and query, kept for up to CacheTTL (default
	// 10m) in a bounded cache of CacheEntries (default 1000) per API.
	Cached       bool     `json:"cached,omitempty"`
	CacheTTL     Duration `json:"cache_ttl,omitempty"`
	CacheEntries int      `json:"cache_entries,omitempty"`
	// Static is the last resort.
	Static *Static `json:"static,omitempty"`
}

// Falls reports whether the fallback applies to cond.
func (f *Fallback) Falls(cond string) bool {
	if len(f.On) == 0 {
		return true
	}
	for _, c := range f.On {
		if c == cond {
			return true
		}
	}
	return false
}

// IPRules are an API's client address rules, applied at the edge before
// anything else of the API: a client matching deny, or matching none of a
// non-empty allow, gets 403 FORBIDDEN. Entries are addresses or CIDR
// prefixes. The client address is the socket peer, or for a trusted proxy
// the right-most untrusted X-Forwarded-For entry (edge --trusted-proxies).
type IPRules struct {
	Allow []string `json:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty"`
}

// Auth says how callers of an API prove who they are.
type Auth struct {
	// Methods accepted: "key" (an app's API key in X-Api-Key or
	// "Authorization: ApiKey <key>"). "none" (or no auth at all) leaves
	// the API open.
	Methods []string `json:"methods"`
	// GrantedOnly (default true) admits only apps granted the API.
	GrantedOnly *bool `json:"granted_only,omitempty"`
	// JWT configures the "jwt" method.
	JWT *JWTAuth `json:"jwt,omitempty"`
	// MTLS configures the "mtls" method: a TLS client certificate that
	// the CA signed names the app (App.CertNames).
	MTLS *MTLSAuth `json:"mtls,omitempty"`
}

// MTLSAuth configures client-certificate authentication of an API.
type MTLSAuth struct {
	// CAFile is a PEM bundle on the edges' hosts: a client certificate
	// must chain to one of them, be valid now and be for client auth.
	CAFile string `json:"ca_file"`
}

// JWTAuth configures bearer-token (JWT) authentication of an API: tokens
// signed by a key of the JWKS, with an allowed algorithm, exp required, nbf,
// iss and aud checked; the AppClaim names the app.
type JWTAuth struct {
	Issuer     string   `json:"issuer,omitempty"`
	Audience   string   `json:"audience,omitempty"`
	Algorithms []string `json:"algorithms"`
	JWKSFile   string   `json:"jwks_file,omitempty"`
	JWKSURL    string   `json:"jwks_url,omitempty"`  // fetched by each edge, refreshed every 5m and on an unknown kid
	AppClaim   string   `json:"app_claim,omitempty"` // default "sub"
	Leeway     Duration `json:"leeway,omitempty"`    // default 30s, at most 5m
}

// check adds the problems of JWT settings at path prefix.
func (j *JWTAuth) check(prefix string, add func(path, format string, args ...any)) {
	if len(j.Algorithms) == 0 {
		add(prefix+".algorithms", "list at least one algorithm")
	}
	for _, alg := range j.Algorithms {
		if !jwtAlgorithms[alg] {
			add(prefix+".algorithms", "%q is not a supported algorithm (never none)", alg)
		}
	}
	if (j.JWKSFile == "") == (j.JWKSURL == "") {
		add(prefix, "give one of jwks_file or jwks_url: the JWKS with the issuer's keys")
	}
	if j.JWKSURL != "" {
		if u, err := url.Parse(j.JWKSURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			add(prefix+".jwks_url", "must be an https:// (or http://) URL")
		}
	}
	if j.Leeway < 0 || time.Duration(j.Leeway) > 5*time.Minute {
		add(prefix+".leeway", "must be between 0 and 5m")
	}
}

// LeewayOrDefault is the clock skew allowed on exp, nbf and iat.
func (j *JWTAuth) LeewayOrDefault() time.Duration {
	if j.Leeway <= 0 {
		return 30 * time.Second
	}
	return time.Duration(j.Leeway)
}

// Has reports whether the API accepts a method.
func (a *Auth) Has(method string) bool {
	if a == nil {
		return false
	}
	for _, m := range a.Methods {
		if m == method {
			return true
		}
	}
	return false
}

var jwtAlgorithms = map[string]bool{
	"HS256": true, "HS384": true, "HS512": true, "RS256": true, "RS384": true, "RS512": true,
	"PS256": true, "PS384": true, "PS512": true, "ES256": true, "ES384": true, "ES512": true, "EdDSA": true,
}

// Requires reports whether the API needs an authenticated app.
func (a *Auth) Requires() bool {
	if a == nil {
		return false
	}
	for _, m := range a.Methods {
		if m != "none" {
			return true
		}
	}
	return false
}

// OnlyGranted reports whether only granted apps may call the API.
func (a *Auth) OnlyGranted() bool { return a.GrantedOnly == nil || *a.GrantedOnly }

// checkPolicies adds the problems of the governance fields.
func (a *API) checkPolicies(params []string, add func(path, format string, args ...any)) {
	names := map[string]bool{}
	for i, r := range a.RateLimits {
		p := fmt.Sprintf("rate_limits.%d", i)
		if r.Name != "" {
			if names[r.Name] {
				add(p+".name", "%q is used by two rules", r.Name)
			}
			names[r.Name] = true
		}
		for _, k := range r.Key {
			if err := checkKeyPart(k, params); err != nil {
				add(p+".key", "%v", err)
			}
		}
		if !r.Keyed() && (r.MaxKeys != 0 || r.Exceptions != nil) {
			add(p, "max_keys and exceptions need a key other than \"api\"")
		}
		switch r.Scope {
		case "", ScopeEdge:
		case ScopeCluster:
			if r.Keyed() || (r.Behavior != "" && r.Behavior != resilience.BehaviorReject) {
				add(p+".scope", "a cluster-wide rule must be a reject rule keyed by api only (for now)")
			}
		default:
			add(p+".scope", "must be edge or cluster")
		}
		addJoined(p, r.Rule().Validate(), add)
	}
	if a.Breaker != nil {
		addJoined("breaker", a.Breaker.Config().Validate(), add)
	}
	if r := a.Retry; r != nil {
		if r.Attempts < 2 || r.Attempts > 10 {
			add("retry.attempts", "must be between 2 and 10")
		}
		for _, c := range r.On {
			if c != RetryOnTimeout && c != RetryOnConnect && c != RetryOn5xx {
				add("retry.on", "%q is not one of timeout, connect, 5xx", c)
			}
		}
		if r.Backoff < 0 || r.MaxBackoff < 0 || r.AttemptTimeout < 0 || r.MinAttempt < 0 {
			add("retry", "durations must not be negative")
		}
		addJoined("retry.budget", r.BudgetConfig().Validate(), add)
	}
	if f := a.Fallback; f != nil {
		for _, c := range f.On {
			if c != FallbackOnTimeout && c != FallbackOn5xx && c != FallbackOnCircuitOpen {
				add("fallback.on", "%q is not one of timeout, 5xx, circuit_open", c)
			}
		}
		if f.API != "" {
			if err := bus.ValidName(f.API); err != nil {
				add("fallback.api", "%v", err)
			} else if f.API == a.Name {
				add("fallback.api", "must not be the API itself")
			}
		}
		if f.API == "" && !f.Cached && f.Static == nil {
			add("fallback", "give at least one of api, cached, static")
		}
		if f.CacheEntries < 0 || f.CacheEntries > 1_000_000 || f.CacheTTL < 0 {
			add("fallback", "cache_entries must be 0 to 1000000 and cache_ttl not negative")
		}
		if f.Static != nil {
			f.Static.check("fallback.static", add)
		}
	}
	if au := a.Auth; au != nil {
		for _, m := range au.Methods {
			if m != "none" && m != "key" && m != "jwt" && m != "hmac" && m != "mtls" {
				add("auth.methods", "%q is not none, key, hmac, jwt or mtls", m)
			}
		}
		if au.Has("mtls") && (au.MTLS == nil || au.MTLS.CAFile == "") {
			add("auth.mtls.ca_file", "is required by the mtls method: the CA client certificates must chain to")
		}
		// Without auth.jwt, the jwt method admits only tokens of the
		// apps' own issuers (App.JWT).
		if j := au.JWT; j != nil {
			j.check("auth.jwt", add)
		}
	}
	if r := a.IPRules; r != nil {
		if _, err := ParsePrefixes(r.Allow); err != nil {
			add("ip_rules.allow", "%v", err)
		}
		if _, err := ParsePrefixes(r.Deny); err != nil {
			add("ip_rules.deny", "%v", err)
		}
	}
	if a.EdgeConcurrency < 0 {
		add("edge_concurrency", "must not be negative")
	}
}

// checkKeyPart checks one part of a rate-limit key.
func checkKeyPart(k string, params []string) error {
	switch k {
	case "api", "app", "ip":
		return nil
	}
	kind, name, ok := strings.Cut(k, ":")
	if !ok || name == "" {
		return fmt.Errorf("%q is not api, app, ip, header:<Name>, query:<name> or param:<name>", k)
	}
	switch kind {
	case "header":
		if !validHeaderName(name) {
			return fmt.Errorf("%q: not a valid header name", k)
		}
	case "query":
	case "param":
		for _, p := range params {
			if p == name {
				return nil
			}
		}
		return fmt.Errorf("%q: the route path has no parameter {%s}", k, name)
	default:
		return fmt.Errorf("%q is not api, app, ip, header:<Name>, query:<name> or param:<name>", k)
	}
	return nil
}

// addJoined reports each error of an errors.Join as its own problem; the
// resilience package prefixes each with its field's JSON name.
func addJoined(prefix string, err error, add func(path, format string, args ...any)) {
	if err == nil {
		return
	}
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else {
		errs = []error{err}
	}
	for _, e := range errs {
		msg := e.Error()
		if field, rest, ok := strings.Cut(msg, ": "); ok && !strings.ContainsAny(field, " ") {
			add(prefix+"."+field, "%s", rest)
		} else {
			add(prefix, "%s", msg)
		}
	}
}

// ParsePrefixes reads addresses ("10.1.2.3", "::1") and CIDR prefixes
// ("10.0.0.0/8"), reporting every bad entry.
func ParsePrefixes(entries []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	var bad []string
	for _, e := range entries {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		if p, err := netip.ParsePrefix(e); err == nil {
			out = append(out, p.Masked())
			continue
		}
		if a, err := netip.ParseAddr(e); err == nil {
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		bad = append(bad, fmt.Sprintf("%q", e))
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("not an address or CIDR prefix: %s", strings.Join(bad, ", "))
	}
	return out, nil
}
