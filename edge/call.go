package edge

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/resilience"
)

// steps are the edge's policies for one routed call, in the order they
// apply (../shared/DESIGN.md, "The order of one call at the edge"). Each
// returns nil to go on, or the error that ends the call; fail writes it.
var steps = [...]func(*call) error{
	(*call).checkAddress,   // the API's client address rules
	(*call).authenticate,   // which app calls: API key, token or signature
	(*call).grant,          // may it call this API, from there, now
	(*call).switchSandbox,  // a sandbox app goes on in the API's sandbox tier
	(*call).setDeadline,    // the tier's timeout, or the caller's shorter one
	(*call).rateLimit,      // the tier's rate-limit rules (limits.go)
	(*call).degrade,        // the API's degrade switch answers instead
	(*call).injectFault,    // the API's fault drill delays or aborts (fault.go)
	(*call).readBody,       // within the API's max_body
	(*call).validate,       // the API's request schemas (validate.go)
	(*call).rewriteRequest, // the API's request rewrites (rewrite.go)
	(*call).cacheLookup,    // the API's response cache answers (cache.go)
	(*call).limitInFlight,  // the API's edge_concurrency
	(*call).enqueue,        // an async call becomes a job: 202 and its address (async.go)
	(*call).shed,           // the API's workers are refusing calls: refuse a share here (shed.go)
	(*call).send,           // one NATS request on the tier's subject
	(*call).reply,          // the worker's reply becomes the response
}

// handler serves the calls routed to an API: its steps, then the error
// that ended them, if any.
func (e *Edge) handler(prod *route) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c := w.(*call) // ServeHTTP routes with the call as the writer
		c.r, c.rt = r, prod
		ctx, endSpan := e.startServer(c)
		defer endSpan()
		c.ctx = ctx
		defer c.finish()
		for _, step := range steps {
			if err := step(c); err != nil {
				c.fail(err)
				return
			}
		}
	}
}

// The X-Forwarded-Proto values, shared by every call (read only).
var protoHTTP, protoHTTPS = []string{"http"}, []string{"https"}

// call is what the edge knows of one request, from ServeHTTP to the
// reply. It is the http.ResponseWriter the router and the handler get, so
// that it also learns how the call ended (for metrics, the access log and
// the trace). Pooled: a call allocates nothing of its own.
type call struct {
	w  http.ResponseWriter // the caller's
	e  *Edge
	r  *http.Request // the routed request (with its route parameters)
	id string        // the request id

	sentPath string     // the escaped path as the caller sent it, before canonicalPath
	addr     netip.Addr // the client's address (clientAddr)
	chain    string     // the X-Forwarded-For to send on
	clientIP string     // addr as text, once the API's address rules passed

	rt       *route          // the API tier; the sandbox tier's for a sandbox app
	ctx      context.Context // the call's trace context
	app      *authApp        // the authenticated app; nil: anonymous
	method   string          // the auth method it was found by (AuthPolicy.method)
	viaDraft bool            // found by the draft's auth policy (draftCaller)
	deadline time.Time
	taken    []resilience.Decision // the rate limits taken, released at the end
	counted  *apiState             // whose in-flight count this call holds; nil: none
	body     *bytes.Buffer         // from bodyPool; nil: not read yet
	bodyErr  *Error                // why reading the body failed: it cannot be read again
	msg      *nats.Msg             // the worker's reply
	out      nats.Msg              // the request to the worker (requestMsg), kept in the pooled call

	status int      // the status sent; 0: none yet
	code   bus.Code // the gateway error code sent, if any
	fault  string   // what a drill injected: "delay", "abort" or ""
	// outcome is the worker's classify verdict on the answer
	// (bus.OutcomeFailed, bus.OutcomeOK), "" when the API has none.
	outcome string
	// upstream is the backend's own status, before a response rewrite
	// mapped it: the one failure is judged by; 0: no backend answer.
	upstream int
	// callerPath is the canonical path the call was routed by, when a
	// path rewrite changed r.URL.RawPath: cached answers are purged by it.
	callerPath string
	// host is the Host a rewrite sends the backend ("": its own).
	host string
	// lastGood is the caller's request as the last-good cache keys it,
	// taken before a rewrite changed it ("": not rewritten).
	lastGood string

	cacheKey    string        // the call's response cache key; "": not cached
	cacheResult string        // "hit", "miss", "stale" or ""
	stale       *cachedAnswer // a stale answer a failure may fall back to
	flight      *flight       // the miss this call answers for the calls waiting on its key
	started     time.Time     // when the call's time began (setDeadline): a purge since drops its answer
	shortened   bool          // the caller's X-Request-Timeout cut the API's timeout
	decoded     any           // the body as validation parsed it, for a body rewrite
	bytes       int           // the body bytes sent
	async       bool          // the call is stored as a job (enqueue)
	user        string        // a token's subject, when a token authenticated the call (async.go)

	refusal Error // what refuse returns, so that refusing allocates nothing more
}

var callPool = sync.Pool{New: func() any { return new(call) }}

// newCall takes a call from the pool for a request that has its id, its
// canonical path and its client address.
func (e *Edge) newCall(w http.ResponseWriter, id, sent string, addr netip.Addr, chain string) *call {
	c := callPool.Get().(*call)
	*c = call{w: w, e: e, id: id, sentPath: sent, addr: addr, chain: chain, taken: c.taken[:0]}
	return c
}

// free puts a finished call back in the pool (finish has released and
// cleared what it took).
func (c *call) free() {
	*c = call{taken: c.taken[:0]}
	callPool.Put(c)
}

func (c *call) Header() http.Header { return c.w.Header() }

func (c *call) WriteHeader(status int) {
	if c.status == 0 {
		c.status = status
		c.markDraft()
	}
	c.w.WriteHeader(status)
}

func (c *call) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
		c.markDraft()
	}
	n, err := c.w.Write(b)
	c.bytes += n
	return n, err
}

var (
	// errEnded ends a call whose response is written already (a degrade
	// switch's own answer), or that nobody waits for any more.
	errEnded = errors.New("call ended")
	// errCallerGone ends a call whose caller went away: 499, no body.
	errCallerGone = errors.New("caller went away")
)

// refuse is the refusal of this call, kept in the call itself.
func (c *call) refuse(code bus.Code, msg string) *Error {
	c.refusal = Error{Code: code, Message: msg}
	return &c.refusal
}

// fail ends the call with a step's error: the one place where a refusal
// becomes the caller's response.
func (c *call) fail(err error) {
	switch err {
	case errEnded:
		return
	case errCallerGone:
		c.WriteHeader(499)
		return
	}
	if c.rt.draftOnly && !c.sandboxApp() {
		err = c.notPublished() // a draft's route is there for sandbox apps alone
	}
	e := asError(err)
	if e.Code == bus.CodeInternal {
		c.e.log.Error("edge step failed", "api", c.rt.api.Name, "request_id", c.id, "err", err)
	}
	c.code = e.Code
	writeRefusal(c, e, c.id)
}

// finish gives back what the call holds, once its response is written.
func (c *call) finish() {
	c.endFlight(flightAbandoned) // a call that ended before its answer: refused, or its caller gone
	if c.cacheKey != "" && c.cacheResult == "" {
		c.countCache("miss")
	}
	if c.body != nil {
		bodyPool.Put(c.body)
	}
	if c.counted != nil {
		c.counted.inflight.Add(-1)
	}
	c.releaseTaken()
}

func (c *call) releaseTaken() {
	release(c.taken)
	clear(c.taken)
	c.taken = c.taken[:0]
}

// appName keys rate limits: the app's id, or "anonymous".
func (c *call) appName() string {
	if c.app == nil {
		return "anonymous"
	}
	return c.app.app.ID
}

// checkAddress applies the API's own client address rules (the edge's
// apply to every request, in ServeHTTP).
func (c *call) checkAddress() error {
	if c.rt.ipRules != nil && !c.rt.ipRules.Allows(c.addr) {
		return c.refuse(bus.CodeForbidden, "client address not allowed for api "+c.rt.api.Name)
	}
	c.clientIP = c.addr.String()
	return nil
}

// authenticate finds the app calling an API that requires one. On a route
// with a draft, a sandbox app the production entry does not find may be
// found by the draft's methods (draftCaller).
func (c *call) authenticate() error {
	p, d := c.rt.auth, c.rt.draft
	var creds credentials
	if d != nil {
		creds = saveCredentials(c.r.Header)
	}
	if p == nil {
		if d != nil && !c.draftCaller(d) {
			creds.restore(c.r.Header)
		}
		return nil // an open API: the caller stays anonymous
	}
	err := c.identify(p)
	switch {
	case err != nil && d != nil:
		creds.restore(c.r.Header)
		if c.draftCaller(d) {
			return nil
		}
	case err == nil && d != nil && c.sandboxApp() && c.draftRechecks(d):
		creds.restore(c.r.Header)
		return c.checkDraftCredentials(d)
	}
	return err
}

// identify finds the app calling by p's methods. A signed request's body
// is read first: its digest is signed.
func (c *call) identify(p *AuthPolicy) error {
	c.method = p.method(c.r)
	if c.method == "jwt" {
		c.user = bearerUser(c.r) // the header goes with identification
	}
	var body []byte
	if c.method == "hmac" {
		if err := c.readBody(); err != nil {
			return err
		}
		body = c.body.Bytes()
	}
	aa, err := p.identifyBy(c.method, c.r, Caller{Addr: c.addr, Path: c.sentPath, Body: body})
	if err != nil {
		c.user = ""
		return err
	}
	c.app = aa // known from here on: its refusals count as its own
	return nil
}

// grant checks that the app may call the API: its grant, its own address
// list and rate limit.
func (c *call) grant() error {
	if c.app == nil {
		return nil
	}
	p := c.rt.auth
	if c.viaDraft {
		p = c.rt.draft.auth
	}
	return p.grant(c.app, c.addr)
}

// switchSandbox moves a sandbox app's call to the API's draft, if it has
// one here, or else to its sandbox tier: their own subject, timeout and
// limits, and none of production's switches.
func (c *call) switchSandbox() error {
	sandbox := c.sandboxApp()
	switch {
	case c.rt.draftOnly:
		if !sandbox {
			return c.notPublished()
		}
	case !sandbox:
		return nil
	case c.rt.draft != nil:
		if err := c.admitDraft(c.rt.draft); err != nil {
			return err
		}
		c.rt = c.rt.draft
	case c.rt.sandbox == nil:
		return c.refuse(bus.CodeNoSandbox, "app "+c.app.app.ID+" is a sandbox app and api "+c.rt.api.Name+" has no sandbox tier")
	default:
		c.rt = c.rt.sandbox
	}
	c.Header()["X-Jetway-Sandbox"] = sandboxTrue
	return nil
}

// sandboxApp reports whether the call is a known sandbox app's.
func (c *call) sandboxApp() bool { return c.app != nil && c.app.app.Sandbox }

var sandboxTrue = []string{"true"}

// setDeadline fixes when the call ends, answered or not: the tier's
// timeout, or the caller's shorter X-Request-Timeout.
func (c *call) setDeadline() error {
	d := requestedTimeout(c.r, c.rt.timeout)
	c.started = time.Now()
	c.deadline, c.shortened = c.started.Add(d), d < c.rt.timeout
	return nil
}

// requestedTimeout reads a caller's X-Request-Timeout ("250ms", "2s" or a
// number of milliseconds). A caller may shorten its deadline, never extend
// it past the API's.
func requestedTimeout(r *http.Request, apiTimeout time.Duration) time.Duration {
	v := r.Header.Get("X-Request-Timeout")
	if v == "" {
		return apiTimeout
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms > int64(apiTimeout/time.Millisecond) {
			return apiTimeout
		}
		d = time.Duration(ms) * time.Millisecond
	}
	if d <= 0 || d > apiTimeout {
		return apiTimeout
	}
	return d
}

// degrade lets the API's degrade switch answer, when it is on.
func (c *call) degrade() error {
	if c.rt.degrade == nil {
		return nil
	}
	return c.rt.degrade.answer(c)
}

// limitInFlight holds one of the API's edge_concurrency slots for the call.
func (c *call) limitInFlight() error {
	rt := c.rt
	if rt.maxInFlight <= 0 {
		return nil
	}
	c.counted = rt.state
	if n := rt.state.inflight.Add(1); n > rt.maxInFlight {
		return c.refuse(bus.CodeOverloaded, fmt.Sprintf("api %s has %d calls in flight on this edge, its limit", rt.api.Name, rt.maxInFlight))
	}
	return nil
}

// bodyPool holds request body buffers. A buffer goes back once the NATS
// request has been written out (nats.go copies the payload).
var bodyPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// readBody reads the request body within the API's limit into a buffer
// from bodyPool (unless authenticate read it already).
func (c *call) readBody() error {
	if c.body != nil {
		return nil
	}
	if c.bodyErr != nil {
		return c.bodyErr // the body was read, in part: never again (a second read would get its tail)
	}
	r, rt := c.r, c.rt
	if r.ContentLength > rt.maxBody {
		return c.refuse(bus.CodePayloadTooLarge, fmt.Sprintf("request body of %d bytes exceeds the %d byte limit of api %s", r.ContentLength, rt.maxBody, rt.api.Name))
	}
	buf := bodyPool.Get().(*bytes.Buffer)
	buf.Reset()
	if r.ContentLength > 0 {
		buf.Grow(int(r.ContentLength))
	}
	n, err := buf.ReadFrom(io.LimitReader(r.Body, rt.maxBody+1))
	if err != nil {
		bodyPool.Put(buf)
		c.bodyErr = &Error{Code: bus.CodeBadRequest, Message: "reading request body: " + err.Error()}
		return c.bodyErr
	}
	if n > rt.maxBody {
		bodyPool.Put(buf)
		c.bodyErr = &Error{Code: bus.CodePayloadTooLarge, Message: fmt.Sprintf("request body exceeds the %d byte limit of api %s", rt.maxBody, rt.api.Name)}
		return c.bodyErr
	}
	c.body = buf
	return nil
}

// send turns the call into one NATS request on the tier's subject and
// waits for the worker's reply until the deadline.
func (c *call) send() error {
	out := &c.out
	wire := c.requestMsg(c.id, c.deadline, out)
	ctx, span := c.e.startSend(c.ctx, c.rt, out.Header)
	ctx, cancel := context.WithDeadline(ctx, c.deadline)
	if c.cacheKey == "" && takesStream(c.rt, c.r.Header.Get("Accept")) {
		// The stream ends with the caller too (the request's context).
		stop := context.AfterFunc(c.r.Context(), cancel)
		err := c.sendStream(ctx, out, wire)
		stop()
		cancel()
		endSend(span, nil)
		return err
	}
	msg, err := c.request(ctx, out, wire)
	cancel()
	endSend(span, err)
	if err != nil {
		if c.r.Context().Err() == nil {
			timedOut := errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)
			if !timedOut || !c.shortened { // a deadline the caller cut says nothing of the backend
				c.endFlight(flightFailed)
			}
			if c.serveStale() {
				return errEnded
			}
		}
		return c.requestError(err)
	}
	c.msg = msg
	return nil
}

// resendable reports whether the edge may send the call twice: its
// method is idempotent, or it carries an Idempotency-Key and its API has
// a retry policy (the API's owner said such calls may be sent again).
func (c *call) resendable() bool {
	switch c.r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodPut, http.MethodDelete:
		return true
	}
	return c.rt.api.Retry != nil && c.r.Header.Get("Idempotency-Key") != ""
}

// maxGapWait bounds how long an idempotent call waits, in all, through
// a gap in its pool's workers (Options.Serving).
const maxGapWait = time.Second

// request sends the call's request and waits for its reply. Through the
// edge's link, an idempotent call survives the loss of the edge's NATS
// connection (bus.Link.Request). And an idempotent call that finds no
// worker while its pool's workers are known to be live (they are
// reconnecting after their NATS node died) tries again for a moment —
// 10, 20, 40 ms ... up to maxGapWait in all, within its deadline — where a
// pool with no worker is still answered NO_WORKERS at once.
func (c *call) request(ctx context.Context, out *nats.Msg, wire int) (*nats.Msg, error) {
	idem := c.resendable()
	var waited time.Duration
	moved := false // to another site, once
	for wait := 10 * time.Millisecond; ; wait *= 2 {
		var msg *nats.Msg
		var err error
		l := c.e.o.Link
		if s := c.e.o.Sites; s != nil {
			l = s.For()
		}
		if l != nil {
			msg, err = l.Request(ctx, out, wire, idem)
		} else {
			msg, err = bus.Request(ctx, c.e.o.Conn, out, wire)
		}
		// A call its site could not carry — not sent, lost in flight
		// (when it may be sent twice), or with no worker there to take
		// it (no responders: nobody got it) — goes once to another site
		// that is up.
		if s := c.e.o.Sites; s != nil && !moved && (errors.Is(err, bus.ErrNotConnected) || errors.Is(err, nats.ErrNoResponders) || idem && errors.Is(err, bus.ErrLinkLost)) {
			if other := s.Elsewhere(l); other != nil {
				moved = true
				msg, err = other.Request(ctx, out, wire, idem)
			}
		}
		if err == nil || !idem || !errors.Is(err, nats.ErrNoResponders) || c.e.o.Serving == nil ||
			waited+wait > maxGapWait || time.Until(c.deadline) < 2*wait || !c.e.o.Serving(c.rt.api.Pool) {
			return msg, err
		}
		select {
		case <-time.After(wait):
			waited += wait
		case <-ctx.Done():
			return nil, err
		}
	}
}

// requestMsg writes the call as a NATS request on the tier's subject into
// out, and returns the wire version it is written in. A cached call
// (c.cacheKey set) carries only what its key holds
// (responseCache.cacheKey): the keyed headers and query parameters, the
// app when keyed, no client address.
func (c *call) requestMsg(id string, deadline time.Time, out *nats.Msg) int {
	r, rt := c.r, c.rt
	var h nats.Header
	rc := rt.respCache
	cached := c.cacheKey != ""
	if cached {
		h = make(nats.Header, len(rc.headers)+8)
		for _, k := range rc.headers {
			if vs, ok := r.Header[k]; ok {
				h[k] = vs
			}
		}
	} else {
		h = nats.Header(r.Header)
	}
	bus.CleanHeaders(h)
	dropCallerForwarding(h)
	delete(h, "Content-Length")
	fw := make([]string, 3) // one array backs the three values
	fw[0], fw[1], fw[2] = c.chain, c.clientIP, r.Host
	if !cached {
		h["X-Forwarded-For"] = fw[0:1:1]
		h["X-Real-Ip"] = fw[1:2:2]
	} else {
		fw[2] = requestHost(r.Host) // the host as it is keyed, not as this caller spelt it
	}
	h["X-Forwarded-Host"] = fw[2:3:3]
	if r.TLS != nil {
		h["X-Forwarded-Proto"] = protoHTTPS
	} else {
		h["X-Forwarded-Proto"] = protoHTTP
	}
	meta := bus.Meta{Method: r.Method, Path: r.URL.RawPath, RawQuery: r.URL.RawQuery, Host: c.host,
		RequestID: id, ClientIP: c.clientIP, Deadline: deadline, Wire: c.e.o.Wire.Send()}
	if c.app != nil && (!cached || rc.app) { // an open API has no app ("anonymous" only keys its limits)
		meta.App = c.app.app.ID
	}
	if cached {
		meta.ClientIP, meta.RawQuery = "", rc.keyedQuery(r.URL.RawQuery)
	}
	if rt.params {
		meta.RawParams = encodeParams(r)
	}
	if !cached && !c.async && takesStream(rt, r.Header.Get("Accept")) {
		meta.Stream = bus.StreamWindow
	}
	bus.EncodeRequest(h, &meta)
	*out = nats.Msg{Subject: rt.subject, Header: h, Data: c.body.Bytes()}
	return meta.Wire
}

// requestError is the refusal for a failed NATS request.
func (c *call) requestError(err error) error {
	rt := c.rt
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return c.refuse(bus.CodeNoWorkers, "no worker of pool "+rt.api.Pool+" is serving api "+rt.key)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		return c.refuse(bus.CodeGatewayTimeout, fmt.Sprintf("api %s did not answer within its deadline", rt.api.Name))
	case c.r.Context().Err() != nil:
		// The caller went away; nobody reads this, but log it.
		c.e.log.Debug("caller cancelled", "api", rt.api.Name, "request_id", c.id)
		return errCallerGone
	case errors.Is(err, bus.ErrLinkLost):
		return c.refuse(bus.CodeBusLost, "the edge's connection to nats was lost while the call was in flight: it may or may not have reached api "+rt.api.Name+", and it is not idempotent, so it was not sent again")
	case errors.Is(err, nats.ErrMaxPayload):
		return c.refuse(bus.CodePayloadTooLarge, "request exceeds the bus max payload")
	default:
		c.e.log.Warn("nats request failed", "api", rt.api.Name, "request_id", c.id, "err", err)
		return c.refuse(bus.CodeBusUnavailable, "the message bus is not reachable from this edge")
	}
}

// reply turns the worker's reply into the HTTP response, and keeps a good
// answer of an API with a cached fallback.
func (c *call) reply() error {
	m := c.msg
	rep, err := bus.DecodeReply(m.Header)
	if err != nil {
		c.endFlight(flightFailed)
		ge := err.(*bus.Error)
		return c.refuse(ge.Code, ge.Message)
	}
	c.noteReply(rep.Code) // the workers' OVERLOADED replies drive the shedding (shed.go)
	fallback := m.Header.Get("X-Jetway-Fallback") != ""
	c.outcome, c.upstream = rep.Outcome, rep.Status
	failed := rep.Code != "" || fallback || c.failedAnswer(rep.Status)
	switch {
	case rep.Code == bus.CodeGatewayTimeout && c.shortened:
		c.endFlight(flightAbandoned) // the worker kept the caller's own short deadline: nothing of the backend
	case failed:
		c.endFlight(flightFailed)
	}
	if failed && c.serveStale() {
		return nil // stale-if-error: the kept answer beats the failure, and a fallback's
	}
	if rep.Code != "" {
		c.code = rep.Code
	}
	r, rt := c.r, c.rt
	status, data := rep.Status, m.Data
	dst := c.Header()
	var kept http.Header // the backend's headers as rewritten: what the cache keeps
	admit := cacheAdmission{}
	if rep.Code == "" && (rt.rewrite != nil || c.cacheKey != "") {
		kept = backendHeader(m.Header)
		if c.cacheKey != "" {
			// What may be kept is the backend's to say, before any
			// rewrite (a status map or a removed Set-Cookie must not make
			// a private answer shared).
			admit = rt.respCache.admits(status, kept, len(data))
		}
		var err error
		if status, data, err = c.rewriteResponse(status, kept, data); err != nil {
			c.e.log.Warn("response not rewritten", "api", rt.api.Name, "request_id", c.id, "err", err)
			c.endFlight(flightFailed) // the waiting calls would fail alike: at once, not one after another
			return c.refuse(bus.CodeBadGateway, err.Error())
		}
		for k, vs := range kept {
			dst[k] = vs
		}
	} else {
		for k, vs := range m.Header {
			if name, ok := bus.DecodeHeaderName(k); ok {
				dst[name] = vs
			}
		}
	}
	if _, ok := dst["Content-Type"]; !ok {
		dst["Content-Type"] = nil // no sniffing: send what the backend sent
	}
	if c.cacheKey != "" {
		dst["X-Cache"] = xCacheMiss
		outcome := flightNotKept
		// A fallback's answer is no answer of the backend's; one whose
		// call began before a purge of the API may be what was purged.
		if !failed && !c.e.purgedSince(rt.api.Name, c.started) &&
			rt.respCache.put(admit, c.cacheKey, c.routedPath(), r.Method, status, kept, data, c.started, time.Now()) {
			outcome = flightKept
		}
		c.endFlight(outcome) // before the write: a slow caller must not hold up the others
	}
	c.WriteHeader(status)
	_, _ = c.Write(data)
	if rep.Code != "" {
		return nil // a gateway error is never a good response
	}
	if rt.cache != nil && rep.Status >= 200 && rep.Status < 300 && (r.Method == http.MethodGet || r.Method == http.MethodHead) && !failed {
		h := dst.Clone()
		delete(h, "X-Request-Id") // each answer gets its own
		rt.cache.Put(cmp.Or(c.lastGood, c.lastGoodKey()), time.Now(), status, h, data)
	}
	return nil
}

// answer is a degrade switch's answer to a call: the API's last good
// response to the same request when the switch wants it and has it, else
// the switch's own response, else its DEGRADED refusal.
func (d *degraded) answer(c *call) error {
	if d.cache != nil {
		if cached := d.cache.Get(c.lastGoodKey(), time.Now()); cached != nil {
			c.code = bus.CodeDegraded
			dst := c.Header()
			for k, v := range cached.Header {
				dst[k] = v
			}
			dst["X-Jetway-Degraded"] = []string{"cached"}
			dst["Age"] = []string{strconv.Itoa(int(time.Since(cached.At) / time.Second))}
			c.WriteHeader(cached.Status)
			_, _ = c.Write(cached.Body)
			return errEnded
		}
	}
	if d.body == nil {
		return d.refusal
	}
	return c.answer(bus.CodeDegraded, d.status, d.header, d.body)
}

// routedPath is the canonical path the call was routed by, before any
// path rewrite.
func (c *call) routedPath() string {
	if c.callerPath != "" {
		return c.callerPath
	}
	return c.r.URL.RawPath
}

// failedAnswer reports whether a backend's answer of this status failed:
// the API's classify verdict when the worker gave one, else a 5xx.
func (c *call) failedAnswer(status int) bool {
	return bus.ReplyFailed(bus.Reply{Status: status, Outcome: c.outcome})
}

// answer ends the call with a fixed answer of the gateway's (a switch's
// own status, headers and body), counted under code.
func (c *call) answer(code bus.Code, status int, h http.Header, body []byte) error {
	c.code = code
	dst := c.Header()
	for k, v := range h {
		dst[k] = v
	}
	c.WriteHeader(status)
	_, _ = c.Write(body)
	return errEnded
}
