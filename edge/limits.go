package edge

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/resilience"
)

// apiState is an API's edge state that outlives registry snapshots: its
// limiters keep their counts when an unrelated field of the entry (or
// another API) changes, and its in-flight count is never reset under
// requests that are still running.
type apiState struct {
	inflight atomic.Int64
	rules    resilience.KeptMap[string, *limitRule] // by the rule's fingerprint: reordered rules keep their counts
	cache    resilience.Kept[*resilience.LastGood]
	// respCache is the tier's response cache (cache.go).
	respCache resilience.Kept[*responseCache]
}

// lastGood returns the API's last-good cache when its fallback keeps one
// (kept while the cache's size and TTL are unchanged), else nil.
func (st *apiState) lastGood(f *registry.Fallback) *resilience.LastGood {
	if f == nil || !f.Cached {
		st.cache.Clear()
		return nil
	}
	c, _ := st.cache.Get(resilience.Fingerprint([]any{f.CacheEntries, f.CacheTTL}), func() (*resilience.LastGood, error) {
		return resilience.NewLastGood(f.CacheEntries, time.Duration(f.CacheTTL)), nil
	})
	return c
}

// limitRule is one compiled rate-limit rule.
type limitRule struct {
	name      string
	parts     []keyPart
	lim       resilience.Limiter         // unkeyed rules
	keyed     *resilience.Keyed          // keyed rules
	cluster   *resilience.ClusterLimiter // cluster-wide rules
	clusterID string
}

// keyPart says where one part of a rule's key comes from.
type keyPart struct {
	kind string // "app", "ip", "header", "query", "param"
	name string
}

// compileRules builds (or keeps, when unchanged) the limiters of an API.
// A rule that fails to build is logged and skipped; the registry validated
// it, so that only happens across incompatible versions.
func (e *Edge) compileRules(st *apiState, a *registry.API) []*limitRule {
	st.rules.Round()
	var out []*limitRule
	for i := range a.RateLimits {
		fp := resilience.Fingerprint(&a.RateLimits[i])
		lr, err := st.rules.Get(fp, fp, func() (*limitRule, error) { return e.compileRule(a, i, fp) })
		if err != nil {
			e.log.Warn("rate-limit rule not applied", "api", a.Name, "rule", ruleName(&a.RateLimits[i], i), "err", err)
			continue
		}
		out = append(out, lr)
	}
	return out
}

// ruleName is how logs and refusals name rule i of an API.
func ruleName(r *registry.RateLimit, i int) string {
	if r.Name == "" {
		return fmt.Sprintf("rule%d", i)
	}
	return r.Name
}

// compileRule builds the limiter of rule i of an API; fp is the rule's
// fingerprint.
func (e *Edge) compileRule(a *registry.API, i int, fp string) (*limitRule, error) {
	r := &a.RateLimits[i]
	lr := &limitRule{name: ruleName(r, i)}
	for _, k := range r.Key {
		if k == "api" {
			continue
		}
		kind, name, _ := strings.Cut(k, ":")
		if kind == "header" {
			name = http.CanonicalHeaderKey(name)
		}
		lr.parts = append(lr.parts, keyPart{kind: kind, name: name})
	}
	var err error
	switch {
	case r.Cluster():
		err = e.cluster.newLimiter(clusterRuleID(a.Key(), []byte(fp)), r, lr)
	case len(lr.parts) > 0:
		lr.keyed, err = resilience.NewKeyed(r.Rule())
	default:
		lr.lim, err = resilience.NewLimiter(r.Rule())
	}
	return lr, err
}

// key builds the rule's key for a request; parts are joined with a unit
// separator, which cannot occur in header values or decoded parameters
// without being part of them.
func (lr *limitRule) key(r *http.Request, app, ip string, query *url.Values) string {
	var b strings.Builder
	for i, p := range lr.parts {
		if i > 0 {
			b.WriteByte(0x1f)
		}
		switch p.kind {
		case "app":
			b.WriteString(app)
		case "ip":
			b.WriteString(ip)
		case "header":
			b.WriteString(r.Header.Get(p.name))
		case "query":
			if *query == nil {
				*query = r.URL.Query()
			}
			b.WriteString(query.Get(p.name))
		case "param":
			b.WriteString(chi.URLParam(r, p.name))
		}
	}
	return b.String()
}

// rateLimit runs the API's rate-limit rules, keeping the decisions to
// release when the call ends. A queue rule's wait is slept here, bounded
// by the deadline; a caller gone meanwhile ends the call unanswered.
func (c *call) rateLimit() error {
	rules := c.rt.rules
	if len(rules) == 0 {
		return nil
	}
	r := c.r
	now := time.Now()
	maxWait := c.deadline.Sub(now)
	// app is the authenticated app ("anonymous" for open APIs), never
	// read from the request's own headers: a caller could name any app.
	app := c.appName()
	var query url.Values
	var wait time.Duration
	for _, lr := range rules {
		var d resilience.Decision
		switch {
		case lr.keyed != nil:
			d = lr.keyed.Take(lr.key(r, app, c.clientIP, &query), now, maxWait)
		case lr.cluster != nil:
			d = lr.cluster.Take(now)
		default:
			d = lr.lim.Take(now, maxWait)
		}
		if !d.Allowed {
			c.releaseTaken()
			e := c.refuse(bus.CodeRateLimited, "rate limit "+lr.name+" exceeded")
			e.RetryAfter = retryAfterSecs(d.RetryAfter)
			return e
		}
		c.taken = append(c.taken, d)
		wait = max(wait, d.Wait)
	}
	if wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			c.releaseTaken()
			return errEnded
		}
	}
	return nil
}

func release(ds []resilience.Decision) {
	for _, d := range ds {
		d.Release()
	}
}
