package edge

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/maypok86/otter/v2"
	"github.com/nats-io/nats.go"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/expr"
	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/resilience"
)

// responseCache is an API tier's response cache on this edge: answers by
// key in a bounded otter cache (W-TinyLFU eviction by weight). Freshness
// is the entry's own (no timer goroutines): a stale entry stays until it
// is replaced, evicted or purged, so that stale-if-error can serve it.
type responseCache struct {
	c          *otter.Cache[string, *cachedAnswer]
	methods    []string
	statuses   map[int]bool
	headers    []string // keyed request headers, canonical, sorted
	query      []string // keyed query parameters, sorted, when keyedQ
	keyedQ     bool     // only the query parameters in query are keyed (and sent)
	app        bool     // the app is keyed
	ttl        time.Duration
	swr, sie   time.Duration
	maxEntry   int
	respectCC  bool
	refreshing *semaphore // the edge's background refreshes

	shared   *sharedStore // cache.shared: the bucket too; nil: memory alone
	subjects sharedSubjects

	// flights are the misses being answered, by key: a call that misses
	// while another call of its key is on its way to the backend waits
	// for that call's answer instead of sending its own (request
	// collapsing), so a burst on a key costs the backend one call per edge.
	mu      sync.Mutex
	flights map[string]*flight
}

// flight is one miss on its way to the backend; done is closed when it
// ends, and outcome says how.
type flight struct {
	done    chan struct{}
	outcome flightOutcome
}

// flightOutcome is how a flight ended, which decides what the calls that
// waited for it do.
type flightOutcome int

const (
	// flightAbandoned: the call ended with no answer of the backend's —
	// its caller left, its own shorter deadline passed, a step refused
	// it. Nothing is known of the key: a waiting call takes the lead.
	flightAbandoned flightOutcome = iota
	// flightKept: the answer is in the cache.
	flightKept
	// flightNotKept: an answer that may not be kept (private, too
	// large): each waiting call goes on its own, at once.
	flightNotKept
	// flightFailed: the backend (or the way to it) failed the key: a
	// waiting call serves a stale answer under stale-if-error, else goes
	// on its own.
	flightFailed
)

// cachedAnswer is one kept answer. Immutable once stored, but refreshing.
type cachedAnswer struct {
	path     string // the request path, for a purge by path
	status   int
	header   http.Header
	body     []byte
	started  time.Time // when the call that got it began: a purge since drops it
	stored   time.Time
	fresh    time.Time // served as a hit until then
	swrUntil time.Time // then served stale while one call refreshes it
	sieUntil time.Time // then served stale when the call fails

	refreshing atomic.Bool
}

// semaphore bounds goroutines: TryAcquire or go without.
type semaphore struct{ ch chan struct{} }

func (s *semaphore) tryAcquire() bool {
	select {
	case s.ch <- struct{}{}:
		return true
	default:
		return false
	}
}
func (s *semaphore) release() { <-s.ch }

// maxRefreshes bounds the background refreshes (stale-while-revalidate)
// an edge runs at once; past it a stale answer is served without one.
const maxRefreshes = 32

// newResponseCache compiles an API tier's cache settings; fingerprint
// names them, with what the answers come from.
func newResponseCache(a *registry.API, c *registry.Cache, auth bool, refreshing *semaphore, shared *sharedStore, fingerprint string) *responseCache {
	rc := &responseCache{
		flights: map[string]*flight{},
		methods: c.Methods, statuses: map[int]bool{}, app: c.KeysApp(auth),
		ttl: time.Duration(c.TTL), swr: time.Duration(c.StaleWhileRevalidate), sie: time.Duration(c.StaleIfError),
		maxEntry: int(c.MaxEntry), respectCC: !c.IgnoreCacheControl, refreshing: refreshing,
	}
	for _, s := range c.Statuses {
		rc.statuses[s] = true
	}
	if c.Shared && shared != nil {
		rc.shared, rc.subjects = shared, newSharedSubjects(a, fingerprint)
	}
	if k := c.Key; k != nil {
		for _, h := range k.Headers {
			rc.headers = append(rc.headers, http.CanonicalHeaderKey(h))
		}
		slices.Sort(rc.headers)
		rc.headers = slices.Compact(rc.headers)
		if k.Query != nil {
			rc.query, rc.keyedQ = slices.Compact(slices.Sorted(slices.Values(k.Query))), true
		}
	}
	rc.c = otter.Must(&otter.Options[string, *cachedAnswer]{
		MaximumWeight: uint64(c.MaxSize),
		Weigher:       func(k string, a *cachedAnswer) uint32 { return uint32(min(a.weight(k), 1<<31)) },
	})
	return rc
}

// weight is what an answer costs the cache's bound: its key, body and
// headers, and a little for the rest.
func (a *cachedAnswer) weight(key string) int {
	n := len(key) + len(a.body) + len(a.path) + 128
	for k, vs := range a.header {
		n += len(k)
		for _, v := range vs {
			n += len(v) + 16
		}
	}
	return n
}

// cacheSettings is what a tier's responseCache is built from: its own
// settings, and what its answers came from — a new backend, pool or route
// starts the cache afresh.
type cacheSettings struct {
	Cache   *registry.Cache
	Auth    bool
	Backend registry.Backend
	Pool    string
	Route   registry.Route
	Rewrite *registry.Rewrite // the answers kept are rewritten ones
}

// responseCache returns the tier's cache (nil: none), kept while its
// settings are unchanged.
func (st *apiState) responseCache(a *registry.API, auth bool, refreshing *semaphore, shared *sharedStore) *responseCache {
	c := a.Cache
	if c == nil {
		st.respCache.Clear()
		return nil
	}
	fp := resilience.Fingerprint(cacheSettings{c, auth, a.Backend, a.Pool, a.Route, a.Rewrite})
	if a.IsDraft() {
		// Each draft revision is tested afresh: none answers from an
		// earlier one's cache.
		fp += "@" + strconv.FormatUint(a.Revision, 10)
	}
	rc, _ := st.respCache.Get(fp, func() (*responseCache, error) {
		return newResponseCache(a, c, auth, refreshing, shared, fp), nil
	})
	return rc
}

// cacheKey is the key of a call, or "" when the call is not cacheable:
// another method, or a body (never part of the key). The key holds all
// the backend of a cached call gets (forCache): method, scheme, host,
// path, the query or its keyed parameters, the keyed headers, the app.
func (rc *responseCache) cacheKey(c *call) string {
	r := c.r
	if !slices.Contains(rc.methods, r.Method) || r.ContentLength != 0 || (c.body != nil && c.body.Len() > 0) {
		return ""
	}
	var b strings.Builder
	b.Grow(len(r.Host) + len(r.URL.RawPath) + len(r.URL.RawQuery) + 32)
	b.WriteString(r.Method)
	if r.TLS != nil {
		b.WriteString(" https://")
	} else {
		b.WriteString(" http://")
	}
	b.WriteString(requestHost(r.Host))
	b.WriteString(r.URL.RawPath)
	b.WriteByte('?')
	b.WriteString(rc.keyedQuery(r.URL.RawQuery))
	for _, h := range rc.headers {
		b.WriteByte('\n')
		b.WriteString(h)
		b.WriteByte(':')
		b.WriteString(strings.Join(r.Header[h], "\x00"))
	}
	if c.host != "" { // a rewrite's condition may have chosen it
		b.WriteString("\nhost:")
		b.WriteString(c.host)
	}
	if c.callerPath != "" {
		// A path rewrite: the route parameters (an http backend's URL
		// placeholders, a nats service's Jetway-Params) come from the
		// caller's path, which the rewritten one need not hold.
		b.WriteString("\nrouted:")
		b.WriteString(c.callerPath)
	}
	if rc.app && c.app != nil {
		b.WriteString("\napp:")
		b.WriteString(c.app.app.ID)
	}
	return b.String()
}

// keyedQuery is the query a cached call sends: the whole query, or only
// the keyed parameters (in the caller's order).
func (rc *responseCache) keyedQuery(raw string) string {
	if !rc.keyedQ || raw == "" {
		return raw
	}
	var kept []string
	for _, p := range strings.Split(raw, "&") {
		name, _, _ := strings.Cut(p, "=")
		if n, err := url.QueryUnescape(name); err == nil {
			if _, ok := slices.BinarySearch(rc.query, n); ok {
				kept = append(kept, p)
			}
		}
	}
	return strings.Join(kept, "&")
}

// The X-Cache values.
var xCacheHit, xCacheMiss, xCacheStale = []string{"hit"}, []string{"miss"}, []string{"stale"}

// cacheLookup answers the call from the API's response cache when it
// holds a fresh answer, or one it may serve stale while it refreshes it in
// the background; otherwise the call goes on, keyed (c.cacheKey) so that
// reply stores its answer and a failure may fall back to a stale one.
func (c *call) cacheLookup() error {
	rc := c.rt.respCache
	if rc == nil || c.isAsync() { // a job's answer is its own, never a cached one
		return nil
	}
	key := rc.cacheKey(c)
	if key == "" {
		return nil
	}
	c.cacheKey = key
	var t *time.Timer
	for {
		if c.serveKept(rc, key, "hit") {
			return errEnded
		}
		// A miss (counted when the call ends): the first of its key goes
		// to the backend, the others wait for its answer.
		rc.mu.Lock()
		f, waiting := rc.flights[key]
		if !waiting {
			f = &flight{done: make(chan struct{})}
			rc.flights[key] = f
			c.flight = f
		}
		rc.mu.Unlock()
		if !waiting {
			return c.sharedLookup(rc, key)
		}
		if t == nil {
			t = time.NewTimer(time.Until(c.deadline))
			defer t.Stop()
		}
		select {
		case <-f.done:
		case <-t.C:
			return c.requestError(context.DeadlineExceeded) // never sent: its time is up
		case <-c.r.Context().Done():
			return errCallerGone
		}
		switch f.outcome {
		case flightKept:
			continue // served above, unless evicted or purged meanwhile
		case flightFailed:
			if c.serveKept(rc, key, "hit") || c.serveStale() {
				return errEnded // stale-if-error, without a call of its own
			}
			return nil
		case flightNotKept:
			return nil // the call goes on its own
		}
		// Abandoned: the next waiting call leads.
	}
}

// sharedLookup reads the bucket for the call that leads a miss of a
// shared cache; an answer found there is kept on this edge too, and
// serves the calls waiting on the key.
func (c *call) sharedLookup(rc *responseCache, key string) error {
	if rc.shared == nil {
		return nil
	}
	a := rc.shared.get(c.ctx, c.deadline, rc.subjects, c.routedPath(), key)
	if a == nil || len(a.body) > rc.maxEntry || c.e.purgedSince(c.rt.api.Name, a.started) {
		return nil
	}
	rc.c.Set(key, a)
	if time.Now().Before(a.swrUntil) {
		c.endFlight(flightKept) // the calls waiting on the key serve it too
	}
	if c.serveKept(rc, key, "shared") {
		return errEnded
	}
	return nil
}

// serveKept answers the call from what the cache keeps for key, when it
// is fresh (counted as hit, "shared" for an answer just read from the
// bucket), or stale within stale-while-revalidate (starting the one
// refresh); it notes a stale answer a failure may fall back to.
func (c *call) serveKept(rc *responseCache, key, hit string) bool {
	a, ok := rc.c.GetIfPresent(key)
	if !ok {
		return false
	}
	now := time.Now()
	switch {
	case now.Before(a.fresh):
		c.countCache(hit)
		c.serveCached(a, xCacheHit, now)
		return true
	case now.Before(a.swrUntil):
		c.countCache("stale")
		if a.refreshing.CompareAndSwap(false, true) {
			c.refresh(rc, key, a)
		}
		c.serveCached(a, xCacheStale, now)
		return true
	case now.Before(a.sieUntil):
		c.stale = a // a failure falls back to it
	}
	return false
}

// endFlight wakes the calls waiting for this call's answer, once it is
// kept or known not to be: outcome says which.
func (c *call) endFlight(outcome flightOutcome) {
	f := c.flight
	if f == nil {
		return
	}
	c.flight = nil
	rc := c.rt.respCache
	rc.mu.Lock()
	if rc.flights[c.cacheKey] == f {
		delete(rc.flights, c.cacheKey)
	}
	rc.mu.Unlock()
	f.outcome = outcome
	close(f.done)
}

// countCache counts a lookup in the metrics: a hit, a stale answer
// served, or (when the call ends without either) a miss.
func (c *call) countCache(result string) {
	c.cacheResult = result
	if m := c.e.o.Metrics; m != nil {
		m.RecordCache(c.rt.key, c.rt.api.Pool, result)
	}
}

// serveCached writes a kept answer, with its age.
func (c *call) serveCached(a *cachedAnswer, xcache []string, now time.Time) {
	dst := c.Header()
	for k, v := range a.header {
		dst[k] = v
	}
	dst["X-Cache"] = xcache
	dst["Age"] = []string{strconv.FormatInt(max(int64(now.Sub(a.stored)/time.Second), 0), 10)} // another edge's clock may be ahead
	c.WriteHeader(a.status)
	if c.r.Method != http.MethodHead {
		_, _ = c.Write(a.body)
	}
}

// serveStale answers a failed call with its stale answer, when
// stale-if-error allows one: true when it did.
func (c *call) serveStale() bool {
	a := c.stale
	if a == nil {
		return false
	}
	c.stale = nil
	c.code = ""
	c.countCache("stale")
	c.serveCached(a, xCacheStale, time.Now())
	return true
}

// refresh calls the backend for a stale answer in the background (one per
// answer, at most maxRefreshes per edge), within the API's timeout, and
// keeps what comes back if it may be kept.
func (c *call) refresh(rc *responseCache, key string, a *cachedAnswer) {
	if !rc.refreshing.tryAcquire() {
		a.refreshing.Store(false)
		return
	}
	// Its own request id and deadline: the stale caller's (which it may
	// shorten with X-Request-Timeout) must not decide the refresh.
	conn, timeout, path, method, e, started := c.e.o.Conn, c.rt.timeout, c.routedPath(), c.r.Method, c.e, time.Now()
	msg := new(nats.Msg) // its own: the call goes back to the pool before the answer comes
	wire := c.requestMsg(newRequestID(), time.Now().Add(timeout), msg)
	// The answer is rewritten as the call's would be: the condition's
	// request part is taken now, its headers copied (the call is gone by
	// the time the answer comes).
	rw, log, api := c.rt.rewrite, c.e.log, c.rt.api.Name
	var in *expr.Input
	if rw != nil && rw.respWhen != nil {
		in = c.condInput()
		in.Header = in.Header.Clone()
	}
	go func() {
		defer rc.refreshing.release()
		defer a.refreshing.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		m, err := bus.Request(ctx, conn, msg, wire)
		if err != nil {
			return
		}
		rep, err := bus.DecodeReply(m.Header)
		if err != nil || rep.Code != "" || bus.ReplyFailed(rep) {
			return // a failed answer never replaces a kept one
		}
		if m.Header.Get("X-Jetway-Fallback") != "" {
			return
		}
		h := backendHeader(m.Header)
		status, data := rep.Status, m.Data
		admit := rc.admits(status, h, len(data))
		if rw != nil {
			if status, data, err = rw.response(in, status, h, data, log, api); err != nil {
				return // not kept: the stale answer stays until it is replaced
			}
		}
		if !e.purgedSince(api, started) {
			rc.put(admit, key, path, method, status, h, data, started, time.Now())
		}
	}()
}

// backendHeader is the backend's own response headers in a worker's
// reply: what a cached answer replays (never a header this edge set for
// the call that stored it, such as Connection: close).
func backendHeader(nh nats.Header) http.Header {
	h := make(http.Header, len(nh))
	for k, vs := range nh {
		if name, ok := bus.DecodeHeaderName(k); ok {
			h[name] = vs
		}
	}
	return h
}

// cacheAdmission is whether, and for how long, an answer may be kept.
type cacheAdmission struct {
	ok            bool
	ttl, swr, sie time.Duration
}

// admits says whether the backend's answer may be kept: a cacheable
// status, no Set-Cookie, not too large, and — unless the entry ignores it
// — a Cache-Control that allows a shared cache to keep it, whose max-age
// (or s-maxage) sets its freshness. Asked of the backend's own status and
// headers, before any rewrite.
func (rc *responseCache) admits(status int, h http.Header, size int) cacheAdmission {
	if !rc.statuses[status] || size > rc.maxEntry || h["Set-Cookie"] != nil || slices.Contains(h["Vary"], "*") {
		return cacheAdmission{}
	}
	ttl, swr, sie := rc.ttl, rc.swr, rc.sie
	if rc.respectCC {
		cc, ok := cacheControl(h["Cache-Control"])
		if !ok {
			return cacheAdmission{}
		}
		if cc.maxAge >= 0 {
			// Freshness left: what the backend's own caches used of it
			// (its Age) is gone.
			ttl = cc.maxAge
			if age, err := strconv.ParseInt(h.Get("Age"), 10, 64); err == nil && age > 0 {
				ttl -= time.Duration(age) * time.Second
			}
		}
		if cc.mustRevalidate {
			swr, sie = 0, 0 // never served stale
		}
	}
	if ttl <= 0 && swr <= 0 && sie <= 0 {
		return cacheAdmission{}
	}
	return cacheAdmission{ok: true, ttl: ttl, swr: swr, sie: sie}
}

// put keeps an answer (as sent: rewritten) that admits admitted, of a call
// whose time began at started. It reports whether the answer is kept and
// may be served now (fresh, or stale while revalidated): one kept for
// stale-if-error alone serves nobody waiting for it.
func (rc *responseCache) put(a cacheAdmission, key, path, method string, status int, h http.Header, body []byte, started, now time.Time) bool {
	if !a.ok || len(body) > rc.maxEntry {
		return false
	}
	kept := h.Clone()
	delete(kept, "X-Request-Id") // each answer gets its own
	delete(kept, "X-Cache")
	delete(kept, "Age")
	delete(kept, "X-Jetway-Fault")
	if method == http.MethodHead {
		body = nil
	}
	fresh := now.Add(a.ttl)
	ans := &cachedAnswer{path: path, status: status, header: kept, body: body, started: started, stored: now,
		fresh: fresh, swrUntil: fresh.Add(a.swr), sieUntil: fresh.Add(a.sie)}
	rc.c.Set(key, ans)
	if rc.shared != nil {
		rc.shared.put(rc.subjects, key, ans)
	}
	return a.ttl > 0 || a.swr > 0
}

// cacheDirectives is what a response's Cache-Control tells a shared cache.
type cacheDirectives struct {
	maxAge         time.Duration // s-maxage, else max-age; -1: none
	mustRevalidate bool          // must-revalidate or proxy-revalidate: never stale
}

// cacheControl reads a response's Cache-Control for a shared cache: ok
// false when it may not keep it (no-store, private, no-cache, or a max-age
// it cannot read).
func cacheControl(vs []string) (cacheDirectives, bool) {
	d := cacheDirectives{maxAge: -1}
	smax := time.Duration(-1)
	for _, v := range vs {
		for _, dir := range strings.Split(v, ",") {
			name, arg, _ := strings.Cut(strings.TrimSpace(dir), "=")
			switch strings.ToLower(name) {
			case "no-store", "private", "no-cache":
				return d, false
			case "must-revalidate", "proxy-revalidate":
				d.mustRevalidate = true
			case "max-age", "s-maxage":
				n, err := strconv.ParseInt(strings.Trim(arg, `"`), 10, 64)
				if err != nil || n < 0 {
					return d, false // unreadable: keep nothing rather than guess
				}
				age := time.Duration(min(n, int64(registry.MaxCacheTTL/time.Second))) * time.Second
				if strings.EqualFold(name, "s-maxage") {
					smax = age
				} else {
					d.maxAge = age
				}
			}
		}
	}
	if smax >= 0 {
		d.maxAge = smax
	}
	return d, true
}

// purge drops an API's kept answers (both tiers) on this edge: all, or
// those of one path. It returns how many.
func (e *Edge) purge(p bus.CachePurge) int {
	n := 0
	path := p.Path
	if path != "" {
		// Kept under the path's canonical form, as the caller's call
		// was routed (/caf%c3%a9 and /caf%C3%A9 are one path).
		if cp, err := canonicalPath(path); err == nil {
			path = cp
		}
	}
	e.purges.Store(p.API, time.Now()) // answers of calls begun before are not kept
	for _, rc := range e.router.Load().caches[p.API] {
		for k, a := range rc.c.All() {
			if path == "" || a.path == path {
				if _, ok := rc.c.Invalidate(k); ok {
					n++
				}
			}
		}
	}
	return n
}

// runPurges answers purge requests until stop is called. A subscription's
// messages are handled one at a time, in order: a flood of purges queues
// in NATS, bounded there (and a slow consumer drops them).
func (e *Edge) runPurges(nc *nats.Conn) (stop func(), err error) {
	sub, err := nc.Subscribe(bus.CachePurgeSubject, func(m *nats.Msg) {
		var p bus.CachePurge
		if json.Unmarshal(m.Data, &p) != nil || p.API == "" {
			return
		}
		n := e.purge(p)
		if m.Reply != "" {
			b, _ := json.Marshal(bus.CachePurged{Purged: n})
			_ = m.Respond(b)
		}
	})
	if err != nil {
		return nil, err
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

// purgedSince reports whether the API's answers were purged on this edge
// at or after t: an answer of a call begun by then may be what the purge
// meant to drop, and is not kept.
func (e *Edge) purgedSince(api string, t time.Time) bool {
	p, ok := e.purges.Load(api)
	return ok && !t.After(p.(time.Time))
}
