// Package edge is Jetway's HTTP front: it matches a request to an API from
// its in-memory copy of the registry, applies the edge policies, and turns
// the request into one NATS request on the API's subject. The edge never
// calls a backend itself.
package edge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/otel"
	"github.com/jetway-gw/jetway/push"
	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/resilience"
)

// Options configure an Edge.
type Options struct {
	// Conn carries requests to the workers. Required.
	Conn *nats.Conn
	// Link, when set, is what the edge knows of Conn (bus.Link): a call
	// in flight when the connection is lost is sent again on the next
	// one if it may be sent twice, and fails at once with BUS_LOST if
	// not. nil: a call in flight then waits for its deadline.
	Link *bus.Link
	// Sites, when set (a standby cluster: --nats-standby), choose the
	// link each call goes out on (bus.Sites.For); Link is then unused.
	Sites *bus.Sites
	// Serving, when set, reports whether a worker of a pool is live
	// (bus.Tracker.Serving, from heartbeats): an idempotent call that
	// finds no worker of a pool said to be live waits a moment for its
	// workers to reconnect instead of failing NO_WORKERS at once.
	Serving func(pool string) bool
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// MaxInFlight caps the requests this edge serves at once, across all
	// APIs; past it a request is refused at once with 503 OVERLOADED.
	// 0 means no cap.
	MaxInFlight int64
	// ClusterInterval is how often edges exchange the reports of
	// cluster-wide rate limits (Run); 0 means DefaultClusterInterval.
	ClusterInterval time.Duration
	// Metrics, when set, get every routed call's outcome and latency.
	Metrics *otel.Metrics
	// AccessLog, when set, gets one line per routed call.
	AccessLog *slog.Logger
	// Tracing, when set, traces every routed call (otel.SetupTracing);
	// nil turns tracing off at no cost.
	Tracing trace.TracerProvider
	// TrustedProxies are the peers whose X-Forwarded-For is believed (see
	// clientAddr); from any other peer it is ignored.
	TrustedProxies []netip.Prefix
	// IPRules apply to every request, before routing.
	IPRules *IPRules
	// Nonces remembers signed requests' nonces across the cluster; without
	// it, signed requests are refused.
	Nonces NonceStore
	// Wire chooses the wire version requests are written in; nil writes
	// this release's (every worker is of this release).
	Wire *bus.WireVersions
	// Certs, when the edge serves TLS, get the registry's certificates
	// with every snapshot (Certs.SetRegistry).
	Certs *Certs
	// Push, when set, serves the topics under /_jetway/ (push.go); every
	// snapshot rechecks its subscribers.
	Push *push.Server
	// Shedding tunes load shedding (shed.go): the calls of an API whose
	// workers answer OVERLOADED are refused in part at the edge, before
	// the NATS trip. The zero value sheds, with the defaults.
	Shedding Shedding
}

// Edge is an http.Handler. Feed it registry snapshots with Apply; each one
// is compiled into an immutable router that requests load atomically, so a
// request never waits for a registry update.
type Edge struct {
	o        Options
	log      *slog.Logger
	router   atomic.Pointer[router]
	inflight atomic.Int64

	// states is only touched by Apply (one goroutine at a time); requests
	// reach their API's state through the route.
	states    resilience.KeptMap[string, *apiState]          // by API.Key
	appLimits resilience.KeptMap[string, resilience.Limiter] // by app id
	jwts      resilience.KeptMap[string, *jwtVerifier]       // by API name, or "app:<id>"
	checks    resilience.KeptMap[string, *requestCheck]      // by API.Key
	// The shared schemas each kept check was built with, by API.Key: of
	// the last round, and of this one.
	checkDeps, nextDeps map[string]map[string]bool
	refreshes           *semaphore   // background cache refreshes (cache.go)
	shared              *sharedStore // the shared response cache (sharedcache.go)
	purges              sync.Map     // API name → time.Time of its last purge on this edge (cache.go)
	cluster             *cluster
	tracer              trace.Tracer       // nil: tracing off
	jobs                *registry.JobStore // the async jobs' statuses and results (async.go)
	jobStreams          atomic.Int64       // job event streams open (async.go)
	shed                *shedder           // load shedding, by API tier (shed.go)
}

// router is the compiled form of one registry snapshot.
type router struct {
	mux    *chi.Mux // the routes without a host
	routes int
	auth   map[string]*AuthPolicy // by API name, for AuthPolicy
	// caches are the response caches of both tiers, by API name, for
	// purges.
	caches map[string][]*responseCache
	topics map[string]*topicRoute // by name
	// The routes with a host (route.host), by exact host and by wildcard
	// suffix (".example.com"), longest first; both empty when no API has
	// a host, which costs a request nothing.
	hosts map[string]*chi.Mux
	wild  []hostMux
}

type hostMux struct {
	suffix string // ".example.com" for *.example.com
	mux    *chi.Mux
}

// muxFor is the mux that serves r: of the muxes for its host — the exact
// host's, then each wildcard that covers it, longest first, then the
// routes without a host — the first that routes r's method and path; when
// none does, the first of them, for its 404 or 405.
func (rt *router) muxFor(r *http.Request) *chi.Mux {
	if len(rt.hosts) == 0 && len(rt.wild) == 0 {
		return rt.mux
	}
	host := requestHost(r.Host)
	var first *chi.Mux
	rctx := chi.NewRouteContext() // one for every try
	try := func(m *chi.Mux) bool {
		if first == nil {
			first = m
		}
		rctx.Reset()
		return m.Match(rctx, r.Method, r.URL.RawPath)
	}
	if m := rt.hosts[host]; m != nil && try(m) {
		return m
	}
	for _, w := range rt.wild {
		if len(host) > len(w.suffix) && strings.HasSuffix(host, w.suffix) && try(w.mux) {
			return w.mux
		}
	}
	if try(rt.mux) {
		return rt.mux
	}
	return first
}

// requestHost is a request's host as routes name it: lower case, without
// port and trailing dot.
func requestHost(h string) string {
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.Contains(h[i:], "]") {
		h = h[:i]
	}
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

// newMux is an empty router with the edge's 404 and 405.
func newMux() *chi.Mux {
	mux := chi.NewMux()
	mux.NotFound(notFound)
	mux.MethodNotAllowed(methodNotAllowed)
	return mux
}

// route is what a request of one API needs; built once per snapshot.
type route struct {
	ipRules     *IPRules    // nil: none
	auth        *AuthPolicy // non-nil when the API requires an authenticated app
	api         *registry.API
	subject     string
	timeout     time.Duration
	maxBody     int64
	params      bool
	degrade     *degraded // non-nil while the API's degrade switch is on
	rules       []*limitRule
	state       *apiState
	maxInFlight int64                // the API's edge_concurrency; 0: none
	cache       *resilience.LastGood // last good responses, for APIs with a cached fallback
	check       *requestCheck        // the request validation; nil: none
	respCache   *responseCache       // the response cache; nil: none
	rewrite     *rewriter            // the request and response rewrites; nil: none
	fault       *faultSwitch         // the API's fault drill on this tier; nil: none
	key         string               // api.Key(): the tier's name in metrics
	sandbox     *route               // the API's sandbox tier, for sandbox apps; nil: none
	// draft is the API's draft on this route, which sandbox apps get
	// instead of the sandbox tier (draft.go); nil: none.
	draft *route
	// draftOnly marks a draft's route of its own: only sandbox apps are
	// routed by it, every other caller gets the 404 of no route.
	draftOnly bool
	revision  string // a draft's revision, for X-Jetway-Draft
}

// degraded is a degrade switch's answer, compiled once per snapshot.
type degraded struct {
	status  int
	header  http.Header
	body    []byte               // nil: the refusal is the answer
	refusal *Error               // the default {"code":"DEGRADED",...} answer, with the switch's status and headers
	cache   *resilience.LastGood // the API's last good responses, when the switch wants them
}

func compileDegrade(d *registry.Degrade, cache *resilience.LastGood) *degraded {
	if d == nil {
		return nil
	}
	status, h, body := d.Response()
	if !d.HasBody() {
		body = nil
	}
	dg := &degraded{status: status, header: h, body: body,
		refusal: &Error{Code: bus.CodeDegraded, Status: status, Message: d.Message(), Header: h}}
	if d.Cached {
		dg.cache = cache
	}
	return dg
}

// headerRoom is what a request leaves of the NATS max payload for headers.
const headerRoom = registry.HeaderRoom

// New returns an edge that answers 404 to everything until the first Apply.
func New(o Options) (*Edge, error) {
	if o.Conn == nil {
		return nil, errors.New("edge: Options.Conn is required")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	jobs, err := registry.NewJobStore(o.Conn)
	if err != nil {
		return nil, fmt.Errorf("edge: %w", err)
	}
	e := &Edge{o: o, log: o.Logger, cluster: newCluster(o.ClusterInterval), tracer: otel.Tracer(o.Tracing, "github.com/jetway-gw/jetway/edge"),
		refreshes: &semaphore{ch: make(chan struct{}, maxRefreshes)}, shared: newSharedStore(o.Conn, o.Logger), jobs: jobs,
		shed: newShedder(o.Shedding)}
	e.Apply(&registry.Snapshot{})
	return e, nil
}

// Apply compiles a snapshot into a router and swaps it in. Of several APIs
// claiming one route, the one published first keeps it across its own edits
// (registry.Conflicts) and the others are skipped with a log line.
func (e *Edge) Apply(s *registry.Snapshot) {
	if e.o.Certs != nil {
		e.o.Certs.SetRegistry(s.Certs)
	}
	apis := s.Sorted()
	registry.SortByClaim(apis)
	conflicts := registry.Conflicts(apis)
	maxPayload := e.o.Conn.MaxPayload()
	// What this snapshot does not ask for (a deleted API's or app's state)
	// goes with the old routes.
	e.states.Round()
	e.appLimits.Round()
	e.jwts.Round()
	e.checks.Round()
	e.checkDeps, e.nextDeps = e.nextDeps, map[string]map[string]bool{}
	apps := e.newAppIndex(s.Apps, func(a *registry.App) *jwtVerifier {
		return e.verifier("app:"+a.ID, a.JWT, a.ID) // API names never hold ':'
	})
	rtr := &router{mux: newMux(), auth: map[string]*AuthPolicy{}, hosts: map[string]*chi.Mux{}, caches: map[string][]*responseCache{}}
	n := 0
	prod := map[string]*route{} // the routed APIs, by name
	for _, a := range apis {
		if other, ok := conflicts[a.Name]; ok {
			e.log.Warn("route conflict; api not routed", "api", a.Name, "route", a.Route.String(), "held_by", other)
			continue
		}
		rt := e.compileRoute(s, a, apps, maxPayload)
		if err := addRoute(rtr.muxOf(a.Route.Host), a.Route.Method, a.Route.Path, e.handler(rt)); err != nil {
			e.log.Warn("route rejected; api not routed", "api", a.Name, "err", err)
			continue
		}
		if rt.auth != nil {
			rtr.auth[a.Name] = rt.auth
		}
		for _, t := range []*route{rt, rt.sandbox} {
			if t != nil && t.respCache != nil {
				rtr.caches[a.Name] = append(rtr.caches[a.Name], t.respCache)
			}
		}
		prod[a.Name] = rt
		n++
	}
	n += e.routeDrafts(s, rtr, prod, apps, maxPayload)
	shared := map[string]*limitRule{}
	for st := range e.states.All() {
		for lr := range st.rules.All() {
			if lr.cluster != nil {
				shared[lr.clusterID] = lr
			}
		}
	}
	e.cluster.setRules(shared)
	rtr.routes = n
	slices.SortFunc(rtr.wild, func(a, b hostMux) int { return len(b.suffix) - len(a.suffix) })
	rtr.topics = compileTopics(s, apps)
	e.router.Store(rtr)
	if e.o.Push != nil {
		e.o.Push.Recheck(s)
	}
}

// compileRoute builds the route of an API (or of a draft) and of its
// sandbox tier from a snapshot.
func (e *Edge) compileRoute(s *registry.Snapshot, a *registry.API, apps *appIndex, maxPayload int64) *route {
	rt := &route{
		api:     a,
		key:     a.Key(),
		subject: a.Subject(),
		timeout: a.TimeoutOrDefault(),
		maxBody: int64(a.MaxBody),
		params:  strings.ContainsAny(a.Route.Path, "{*"),
	}
	st := e.state(rt.key)
	rt.cache = st.lastGood(a.Fallback)
	if a.Auth.Requires() {
		rt.auth = &AuthPolicy{api: a, apps: apps}
	}
	if rt.auth != nil && a.Auth.Has("mtls") && a.Auth.MTLS != nil {
		pool, err := bus.LoadCertPool(a.Auth.MTLS.CAFile)
		if err != nil {
			e.log.Error("client certificate CA not loaded; the api refuses certificates", "api", a.Name, "err", err)
		}
		rt.auth.mtls = pool
	}
	if a.Auth.Has("jwt") && a.Auth.JWT != nil {
		jwt := e.verifier(a.Key(), a.Auth.JWT, "")
		if rt.auth != nil {
			rt.auth.jwt = jwt
		}
	}
	if a.IPRules != nil {
		allow, _ := registry.ParsePrefixes(a.IPRules.Allow) // validated at publish
		deny, _ := registry.ParsePrefixes(a.IPRules.Deny)
		rt.ipRules = &IPRules{Allow: allow, Deny: deny}
	}
	if !a.IsDraft() { // a draft is a sandbox tier: no production switch
		rt.degrade = compileDegrade(s.Degrade[a.Name], rt.cache)
	}
	rt.fault = compileFault(s.Faults[a.Name], a.IsDraft())
	rt.state, rt.rules, rt.maxInFlight = st, e.compileRules(st, a), int64(a.EdgeConcurrency)
	rt.check = e.compileCheck(rt.key, a.Validate, s.JSONSchemas)
	rt.respCache = st.responseCache(a, rt.auth != nil, e.refreshes, e.shared)
	rt.rewrite = e.compileRewrite(rt.key, a.Rewrite)
	if rt.maxBody <= 0 {
		rt.maxBody = int64(registry.DefaultMaxBody)
	}
	if maxPayload > 0 && rt.maxBody > maxPayload-headerRoom {
		rt.maxBody = maxPayload - headerRoom
	}
	if sba := a.SandboxAPI(); sba != nil {
		// The call switches to it once production's route has
		// authenticated a sandbox app (call.switchSandbox): from there
		// on the tier's own subject, timeout and limits, and none of
		// production's governance.
		sb := &route{api: sba, key: sba.Key(), subject: sba.Subject(),
			timeout: sba.TimeoutOrDefault(), maxBody: rt.maxBody, params: rt.params}
		sb.state = e.state(sb.key)
		sb.rules = e.compileRules(sb.state, sba)
		sb.check = e.compileCheck(sb.key, sba.Validate, s.JSONSchemas)
		sb.fault = compileFault(s.Faults[a.Name], true)
		sb.respCache = sb.state.responseCache(sba, rt.auth != nil, e.refreshes, e.shared)
		sb.rewrite = e.compileRewrite(sb.key, sba.Rewrite)
		rt.sandbox = sb
	}
	return rt
}

// muxOf is the mux of a route's host ("" for none), made on first use.
func (rt *router) muxOf(host string) *chi.Mux {
	if host == "" {
		return rt.mux
	}
	if suffix, ok := strings.CutPrefix(host, "*"); ok {
		for _, w := range rt.wild {
			if w.suffix == suffix {
				return w.mux
			}
		}
		m := newMux()
		rt.wild = append(rt.wild, hostMux{suffix, m})
		return m
	}
	m := rt.hosts[host]
	if m == nil {
		m = newMux()
		rt.hosts[host] = m
	}
	return m
}

// AuthPolicy is how the registry in force authenticates the callers of an
// API (for Authenticate): nil for an API that is open or not routed. A
// transport of the edge's own (push over WebSocket or TCP, say) admits its
// clients with it, by the same keys, tokens and signed requests.
func (e *Edge) AuthPolicy(api string) *AuthPolicy { return e.router.Load().auth[api] }

// jwtSettings is what a verifier is built from: the settings and, for a
// jwks_file, the file's content (a URL's keys are refreshed by the
// verifier itself).
type jwtSettings struct {
	Auth *registry.JWTAuth
	File []byte
}

// verifier returns the token checks of settings c, kept under key while c
// and its JWKS are unchanged (its cache and fetched keys survive unrelated
// registry changes, and a jwks_url API is never left without keys until a
// new fetch returns), else a new one. nil when the keys do not load: those
// tokens are refused (fail closed) until they do. app, if set, is the app
// every valid token is.
func (e *Edge) verifier(key string, c *registry.JWTAuth, app string) *jwtVerifier {
	file, ferr := readJWKS(c)
	v, err := e.jwts.Get(key, resilience.Fingerprint(jwtSettings{c, file}), func() (*jwtVerifier, error) {
		if ferr != nil { // never kept: a file that cannot be read matches nothing
			return nil, ferr
		}
		v, err := newJWTVerifier(c, file)
		if err == nil {
			v.app = app
		}
		return v, err
	})
	if err != nil {
		e.log.Error("jwt keys not loaded; these tokens are refused", "for", key, "err", err)
		return nil
	}
	return v
}

// state returns the kept state of an API tier (by API.Key): kept for as
// long as the tier exists, whatever its settings.
func (e *Edge) state(key string) *apiState {
	st, _ := e.states.Get(key, "", func() (*apiState, error) { return &apiState{}, nil })
	return st
}

// appLimiter returns the app's limiter, kept while its limit is unchanged
// so that registry changes never reset its count.
func (e *Edge) appLimiter(a *registry.App) resilience.Limiter {
	if a.RateLimit == nil {
		return nil
	}
	lim, err := e.appLimits.Get(a.ID, resilience.Fingerprint(a.RateLimit), func() (resilience.Limiter, error) {
		rule := registry.RateLimit{Limit: a.RateLimit.Limit, Window: a.RateLimit.Window}
		return resilience.NewLimiter(rule.Rule())
	})
	if err != nil {
		e.log.Warn("app rate limit not applied", "app", a.ID, "err", err)
		return nil
	}
	return lim
}

// Run exchanges cluster-wide rate-limit reports with the other edges over
// NATS until ctx ends. Without it, cluster-wide rules act as if this edge
// were alone.
func (e *Edge) Run(ctx context.Context) error {
	stop, err := e.runPurges(e.o.Conn)
	if err != nil {
		return err
	}
	defer stop()
	return e.cluster.run(ctx, e.o.Conn)
}

// Edges is the number of live edges this edge has heard from, itself
// included (cluster-wide limits are shared among them).
func (e *Edge) Edges() int { return e.cluster.live(time.Now()) }

// InFlight is the number of requests the edge is serving.
func (e *Edge) InFlight() int64 { return e.inflight.Load() }

// Routes is the number of routes in force.
func (e *Edge) Routes() int { return e.router.Load().routes }

// addRoute adds one route, turning a chi setup panic into an error.
func addRoute(mux *chi.Mux, method, path string, h http.HandlerFunc) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%v", p)
		}
	}()
	if method == "*" {
		mux.Handle(path, h)
	} else {
		mux.Method(method, path, h)
	}
	return nil
}

func notFound(w http.ResponseWriter, r *http.Request) {
	writeError(w, bus.CodeRouteNotFound, "no api is published at "+r.Method+" "+r.URL.EscapedPath(), w.Header().Get("X-Request-Id"))
}

func methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	writeError(w, bus.CodeMethodNotAllowed, "method "+r.Method+" is not published for this path", w.Header().Get("X-Request-Id"))
}

// ServeHTTP gives the request an id, checks its path is canonical, and
// routes it with the router in force.
func (e *Edge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get("X-Request-Id")
	if !validRequestID(id) {
		id = newRequestID()
	}
	w.Header()["X-Request-Id"] = []string{id}
	refuse, closeAfter := framingVerdict(r)
	if len(r.TransferEncoding) > 0 || closeAfter {
		// A chunked request may also have carried a Content-Length that
		// Go's server dropped unseen; a front proxy that believed it would
		// see the rest of the body as a next request. Close after
		// answering, so nothing smuggled behind it is ever served; the
		// same once the framing guard has stopped watching.
		w.Header()["Connection"] = []string{"close"}
	}
	if refuse {
		writeError(w, bus.CodeBadRequest, "request framing is ambiguous (Content-Length with Transfer-Encoding, or Transfer-Encoding on HTTP/1.0)", id)
		return
	}
	// Route, authenticate and forward one string: the canonical escaped
	// path (see canonicalPath). It is computed from the bytes the caller
	// sent, which Go keeps in RawPath unless they are the default escaping
	// of Path. Path, the decoded form, is the same for both.
	sent := r.URL.RawPath
	if sent == "" {
		sent = r.URL.EscapedPath()
	}
	canon, err := canonicalPath(sent)
	if err != nil {
		writeError(w, bus.CodeBadRequest, "request path "+err.Error(), id)
		return
	}
	r.URL.RawPath = canon
	addr, chain := clientAddr(r, e.o.TrustedProxies)
	if !e.o.IPRules.empty() && !e.o.IPRules.Allows(addr) {
		writeError(w, bus.CodeForbidden, "client address not allowed", id)
		return
	}
	if _, overTCP := w.(*tcpHandshake); overTCP && !strings.HasPrefix(canon, BuiltinPrefix+"tcp/") {
		// The connect frame's path was checked before its canonical
		// form: nothing but a subscription is served over TCP.
		writeError(w, bus.CodeRouteNotFound, "the push TCP listener serves /_jetway/tcp/<topic> only", id)
		return
	}
	if rest, ok := strings.CutPrefix(canon, BuiltinPrefix+"jobs/"); ok {
		e.serveJob(w, r, id, rest, sent, addr) // async jobs (async.go)
		return
	}
	if api, ok := strings.CutPrefix(canon, BuiltinPrefix+"outcomes/"); ok {
		e.serveOutcomes(w, r, id, api, sent, addr) // late outcomes of channel calls (outcomes.go)
		return
	}
	if strings.HasPrefix(canon, BuiltinPrefix) {
		// Push connections live long: they are not in-flight calls (a
		// publish counts itself).
		e.servePush(w, r, id, canon, sent, addr)
		return
	}
	n := e.inflight.Add(1)
	defer e.inflight.Add(-1)
	if limit := e.o.MaxInFlight; limit > 0 {
		if n > limit {
			writeError(w, bus.CodeOverloaded, fmt.Sprintf("this edge is serving %d requests, its limit", limit), id)
			return
		}
	}
	c := e.newCall(w, id, sent, addr, chain)
	start := time.Now()
	e.router.Load().muxFor(r).ServeHTTP(c, r)
	e.observe(c, r, start)
	c.free()
}

// lastGoodKey identifies "the same request" for the last-good cache: the
// method, path and query, and the app that asked (one app's answer is
// never another's).
func (c *call) lastGoodKey() string {
	k := c.r.Method + " " + c.r.URL.RawPath + "?" + c.r.URL.RawQuery
	if c.app != nil {
		k += "\napp:" + c.app.app.ID
	}
	return k
}

// encodeParams writes the route parameters as a URL query string.
func encodeParams(r *http.Request) string {
	rctx := chi.RouteContext(r.Context())
	if rctx == nil {
		return ""
	}
	var b strings.Builder
	for i, k := range rctx.URLParams.Keys {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(url.QueryEscape(k))
		b.WriteByte('=')
		b.WriteString(url.QueryEscape(rctx.URLParams.Values[i]))
	}
	return b.String()
}

// peerIP is the IP of the socket peer (never a forwarding header).
func peerIP(remoteAddr string) string {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		return remoteAddr
	}
	return host
}
