package registry

import (
	"strings"
	"testing"
	"time"
)

const governed = `{
  "name": "orders.get", "pool": "orders",
  "route": {"path": "/v1/orders/{id}"},
  "backend": {"type": "http", "url": "http://127.0.0.1:9001/orders/{id}"},
  "rate_limits": [
    {"name": "api", "limit": 1000},
    {"name": "per-app", "key": ["app"], "limit": 50, "window": "1s"},
    {"key": ["app", "header:X-Region"], "limit": 10, "window": "1m"},
    {"key": ["param:id"], "limit": 5, "exceptions": {"42": 100}, "max_keys": 5000},
    {"behavior": "warmup", "limit": 200, "warm_up": "10s", "cold_factor": 3},
    {"behavior": "queue", "key": ["ip"], "limit": 20, "max_queue": "200ms"},
    {"behavior": "concurrency", "key": ["app"], "limit": 4}
  ],
  "edge_concurrency": 128,
  "breaker": {"consecutive_failures": 5, "failure_ratio": 0.5, "min_calls": 20, "open_for": "5s", "shared": true},
  "retry": {"attempts": 3, "on": ["connect", "5xx"], "backoff": "20ms", "budget": {"ratio": 0.1}},
  "fallback": {"api": "orders.get.cache", "cached": true, "static": {"status": 200, "json": {"items": []}}}
}`

func TestParseGovernedAPI(t *testing.T) {
	a, err := ParseAPI("", []byte(governed))
	if err != nil {
		t.Fatal(err)
	}
	if len(a.RateLimits) != 7 || !a.RateLimits[1].Keyed() || a.RateLimits[0].Keyed() {
		t.Fatalf("rate limits %+v", a.RateLimits)
	}
	if r := a.RateLimits[3].Rule(); r.Limit != 5 || r.Exceptions["42"] != 100 || r.MaxKeys != 5000 {
		t.Errorf("rule %+v", r)
	}
	if c := a.Breaker.Config(); c.ConsecutiveFailures != 5 || c.OpenFor != 5*time.Second || !a.Breaker.IsShared() {
		t.Errorf("breaker %+v", c)
	}
	if !a.Retry.Retries("5xx") || a.Retry.Retries("timeout") || a.Retry.BudgetConfig().Ratio != 0.1 {
		t.Errorf("retry %+v", a.Retry)
	}
	if !a.Fallback.Falls("timeout") || a.Fallback.Static.Status != 200 {
		t.Errorf("fallback %+v", a.Fallback)
	}
	if _, err := ParseAPI(a.Name, a.Marshal()); err != nil {
		t.Fatalf("round trip: %v", err)
	}
}

func TestPolicyProblems(t *testing.T) {
	base := `"name":"a","pool":"p","route":{"path":"/a/{id}"},"backend":{"type":"mock"}`
	for _, tc := range []struct {
		extra string
		want  string
	}{
		{`"rate_limits":[{"key":["cookie"],"limit":1}]`, `rate_limits.0.key: "cookie" is not api`},
		{`"rate_limits":[{"key":["param:other"],"limit":1}]`, `rate_limits.0.key: "param:other": the route path has no parameter {other}`},
		{`"rate_limits":[{"limit":1,"exceptions":{"x":1}}]`, `rate_limits.0: max_keys and exceptions need a key`},
		{`"rate_limits":[{"name":"x","limit":1},{"name":"x","limit":2}]`, `rate_limits.1.name: "x" is used by two rules`},
		{`"rate_limits":[{"behavior":"queue","limit":1,"warm_up":"1s"}]`, `rate_limits.0.warm_up`},
		{`"breaker":{"failure_ratio":1.5}`, `breaker.failure_ratio`},
		{`"retry":{"attempts":1}`, `retry.attempts`},
		{`"fallback":{}`, `fallback: give at least one of api, cached, static`},
		{`"fallback":{"api":"a"}`, `fallback.api: must not be the API itself`},
		{`"fallback":{"static":{"body":"x","json":1}}`, `fallback.static: give body or json, not both`},
	} {
		_, err := ParseAPI("", []byte("{"+base+","+tc.extra+"}"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want a problem %q", tc.extra, err, tc.want)
		}
	}
}

func TestIPRulesValidation(t *testing.T) {
	base := `"name":"a","pool":"p","route":{"path":"/a"},"backend":{"type":"mock"}`
	if _, err := ParseAPI("", []byte(`{`+base+`,"ip_rules":{"allow":["10.0.0.0/8","::1"],"deny":["10.1.2.3"]}}`)); err != nil {
		t.Fatal(err)
	}
	_, err := ParseAPI("", []byte(`{`+base+`,"ip_rules":{"allow":["10.0.0.0/33"],"deny":["nope"]}}`))
	if err == nil || !strings.Contains(err.Error(), "ip_rules.allow") || !strings.Contains(err.Error(), "ip_rules.deny") {
		t.Fatalf("got %v", err)
	}
}
