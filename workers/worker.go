package workers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetway-gw/jetway/backend"
	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/otel"
	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/resilience"
)

// Options configure a Worker.
type Options struct {
	// Conn carries the API requests. Required.
	Conn *nats.Conn
	// Link, when set, is what the worker knows of Conn (bus.Link): an
	// answer the connection's loss kept from going out goes out on the
	// next connection, within the call's deadline.
	Link *bus.Link
	// Pools the worker serves; empty means every pool (as `jetway serve`).
	Pools []string
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Tracing, when set, traces every call (otel.SetupTracing); nil turns
	// tracing off at no cost.
	Tracing trace.TracerProvider
	// Wire chooses the wire version of the requests a fallback sends to
	// another API; nil writes this release's.
	Wire *bus.WireVersions
	// JobAckWait is how long an async job taken by a worker that went
	// silent waits before another worker takes it (jobs.go); 0 means
	// DefaultJobAckWait.
	JobAckWait time.Duration
	// JobBytes bounds the bytes of the async jobs one worker holds at
	// once per pool (their requests); 0 means DefaultJobBytes.
	JobBytes int64
}

// Worker serves the APIs of its pools. Feed it registry snapshots with
// Apply (register it with registry.Watcher.OnChange); it subscribes to each
// API of its pools in the pool's queue group and keeps one pipeline per API.
type Worker struct {
	o        Options
	log      *slog.Logger
	adapters map[string]backend.Adapter // by backend type (adapters.go)

	mu      sync.Mutex // guards subs and closing; never taken by a request
	subs    map[string]*apiSub
	closing bool
	// poolSubs is subs by pool as Apply left them, read without mu by
	// each pull of jobs (jobRoom).
	poolSubs atomic.Pointer[map[string][]*apiSub]

	tracer       trace.Tracer         // nil: tracing off
	clientTracer backend.Tracer       // the backend calls' spans; nil: tracing off
	id           string               // this worker's id in breaker events
	breakers     []*nats.Subscription // the pools' breaker changes
	micro        []*nats.Subscription // the NATS services protocol (micro.go)
	started      time.Time

	// snap is the registry as last applied: a fallback to another API
	// finds that API's subject (its pool) there.
	snap atomic.Pointer[registry.Snapshot]

	inflight atomic.Int64 // calls in flight across all APIs
	dropped  atomic.Int64 // requests dropped because their deadline had passed
	// wireIn counts the requests received by wire version (index 0: one
	// this worker does not read), so an operator sees when no node writes
	// the previous version any more.
	wireIn [bus.WireVersion + 1]atomic.Int64

	// calls hands an admitted call to an idle runner goroutine (runCalls);
	// unbuffered, so a send succeeds only when one is waiting. stopped is
	// closed by Shutdown and lets idle runners go.
	// Async jobs (jobs.go): the JetStream context, the job store (opened
	// on first need) and the loops taking each pool's jobs (under mu).
	js       jetstream.JetStream
	jobs     *registry.JobStore
	jobPools map[string]*jobPool
	// jobCounts are the async job counters, by API tier key (*jobCounters).
	jobCounts sync.Map
	// The HTTP clients of callbacks (callbacks.go).
	publicCallbacks, anyCallbacks *http.Client

	// chans is the channel sets' machinery (chancontrol.go).
	chans channelMachinery

	calls    chan admitted
	spawned  atomic.Int64 // runner goroutines started, for tests
	stopped  chan struct{}
	stopOnce sync.Once
}

// admitted is a call admitted by dispatch, waiting for a goroutine.
type admitted struct {
	inv invocation
	m   *nats.Msg
}

// runnerIdle is how long a runner goroutine waits for its next call
// before it ends.
const runnerIdle = 10 * time.Second

// apiSub is one API's subscription and its hot-path state.
type apiSub struct {
	pool     string
	sub      *nats.Subscription
	state    atomic.Pointer[apiState]
	inflight atomic.Int64
	stats    apiStats   // for the NATS services protocol (micro.go)
	gov      governance // touched only by Apply, under Worker.mu
}

// apiState is everything a request of the API needs, built once per
// registry change and swapped atomically.
type apiState struct {
	api     *registry.API
	held    *held // the backend instance the stack calls
	backend backend.Backend
	limit   int64
	timeout time.Duration
	breaker *resilience.Breaker // nil without a breaker policy
}

// headerRoom is what a reply leaves of the max payload for headers.
const headerRoom = 64 << 10

// New returns a worker. It serves nothing until the first Apply.
func New(o Options) (*Worker, error) {
	if o.Conn == nil {
		return nil, fmt.Errorf("workers: Options.Conn is required")
	}
	for _, p := range o.Pools {
		if err := bus.ValidName(p); err != nil {
			return nil, fmt.Errorf("pool %q: %w", p, err)
		}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.JobAckWait <= 0 {
		o.JobAckWait = DefaultJobAckWait
	}
	if o.JobBytes <= 0 {
		o.JobBytes = DefaultJobBytes
	}
	maxResp := int64(bus.EmbeddedMaxPayload) - headerRoom
	if mp := o.Conn.MaxPayload(); mp > 0 {
		maxResp = mp - headerRoom
	}
	w := &Worker{
		o:        o,
		log:      o.Logger,
		adapters: adapters(o.Conn, int(maxResp)),
		subs:     map[string]*apiSub{},
		id:       nuid.Next(),
		calls:    make(chan admitted),
		jobPools: map[string]*jobPool{},
		stopped:  make(chan struct{}),
		tracer:   otel.Tracer(o.Tracing, "github.com/jetway-gw/jetway/workers"),
	}
	if w.tracer != nil {
		w.clientTracer = &clientTracer{w.tracer}
	}
	js, err := jetstream.New(o.Conn)
	if err != nil {
		return nil, fmt.Errorf("opening jetstream: %w", err)
	}
	w.js = js
	if w.jobs, err = registry.NewJobStore(o.Conn); err != nil {
		return nil, err
	}
	w.publicCallbacks, w.anyCallbacks = callbackClients()
	// Only the breaker changes of the worker's own pools: a worker's NATS
	// user may hear no others (bus.RolePermissions).
	subjects := []string{BreakerSubjectPrefix + ">"}
	if len(o.Pools) > 0 {
		subjects = subjects[:0]
		for _, p := range o.Pools {
			subjects = append(subjects, BreakerSubjectPrefix+bus.PoolToken(p)+".>")
		}
	}
	for _, subj := range subjects {
		sub, err := o.Conn.Subscribe(subj, w.onBreakerEvent)
		if err != nil {
			for _, s := range w.breakers {
				_ = s.Unsubscribe()
			}
			return nil, fmt.Errorf("subscribing to breaker changes: %w", err)
		}
		w.breakers = append(w.breakers, sub)
	}
	w.startMicro()
	return w, nil
}

// ID is the worker's node id, as breaker events and channel states name it.
func (w *Worker) ID() string { return w.id }

// serves reports whether the worker serves pool.
func (w *Worker) serves(pool string) bool {
	return len(w.o.Pools) == 0 || slices.Contains(w.o.Pools, pool)
}

// Apply brings subscriptions and pipelines in line with a snapshot: new APIs
// of the worker's pools are subscribed, removed ones drained, changed ones
// get a new pipeline without losing a request.
func (w *Worker) Apply(s *registry.Snapshot) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closing {
		return
	}
	w.snap.Store(s)
	// The API tiers this worker serves, by API.Key: each API of its
	// pools, each sandbox tier of its pools, and each draft of its pools
	// (on the sandbox subjects, registry/draft.go).
	want := map[string]*registry.API{}
	for name, a := range s.APIs {
		if w.serves(a.Pool) {
			want[name] = a
		}
		if sb := a.SandboxAPI(); sb != nil && w.serves(sb.Pool) {
			want[sb.Key()] = sb
		}
	}
	for _, d := range s.Drafts {
		if w.serves(d.Pool) {
			want[d.Key()] = d
		}
	}
	for key, as := range w.subs {
		if a, ok := want[key]; !ok || a.Pool != as.pool {
			if err := as.sub.Drain(); err != nil {
				w.log.Warn("draining subscription", "api", key, "err", err)
			}
			delete(w.subs, key)
			go retireWhenDrained(as.sub, as.gov.backend.Value())
		}
	}
	w.applyJobs(want)
	w.dropChannelSets(want)
	added := false
	for key, a := range want {
		if as, ok := w.subs[key]; ok {
			old := as.gov.backend.Value()
			as.state.Store(w.build(a, &as.gov))
			if as.gov.backend.Value() != old {
				old.retire() // closed when its calls in flight are done
			}
			continue
		}
		as := &apiSub{pool: a.Pool}
		as.state.Store(w.build(a, &as.gov))
		sub, err := w.o.Conn.QueueSubscribe(a.Subject(), bus.QueueGroup(a.Pool), func(m *nats.Msg) { w.dispatch(as, m) })
		if err != nil {
			w.log.Error("subscribing api", "api", key, "pool", a.Pool, "err", err)
			as.gov.backend.Value().retire() // no call will ever reach it
			continue
		}
		as.sub = sub
		w.subs[key] = as
		added = true
	}
	byPool := map[string][]*apiSub{}
	for _, as := range w.subs {
		byPool[as.pool] = append(byPool[as.pool], as)
	}
	w.poolSubs.Store(&byPool)
	if added {
		// Make sure the server has the new subscriptions before the
		// worker says it serves them, which shortens the moment an edge
		// that already routes a new API finds no worker for it.
		if err := w.o.Conn.FlushTimeout(time.Second); err != nil {
			w.log.Warn("flushing new subscriptions", "err", err)
		}
	}
}

// build makes an API's pipeline from its definition: the backend instance
// (kept while the backend spec is unchanged) wrapped in the API's stack
// (gov keeps what must outlive the snapshot).
func (w *Worker) build(a *registry.API, gov *governance) *apiState {
	h := w.instance(a, gov)
	var b backend.Backend
	if a.HasChannels() {
		gov.chanBreakers.Round()
		b = w.newChannelStack(a, gov, w.channelSet(a, h, w.chanSetOf(a), gov))
	} else {
		b = w.newStack(a, gov, h.call)
	}
	return &apiState{api: a, held: h, backend: b, limit: int64(a.Concurrency), timeout: a.TimeoutOrDefault(), breaker: gov.breaker.Value()}
}

// newStack wraps an API's backend in its middlewares, outermost first, one
// line each; a line is a no-op (nil) when the API does not use it. An
// attempt asks the breaker, so an open circuit is never retried but may
// fall back.
func (w *Worker) newStack(a *registry.API, g *governance, b backend.Backend) backend.Backend {
	return backend.Chain(b,
		w.tracing(a),     // the worker's span of the call (trace.go)
		w.fallback(a, g), // another API, the last good response, or a static one
		w.retry(a, g),    // what the policy allows, within the deadline and budget
		w.breaker(a, g),  // fails fast while the circuit is open, records outcomes
		w.classify(a),    // the API's one definition of failure (classify.go)
	)
}

// newChannelStack is newStack for an API served by channels: the breaker
// and classify are each channel's (channelSet), and failing over to the
// next channel is the retry.
func (w *Worker) newChannelStack(a *registry.API, g *governance, b backend.Backend) backend.Backend {
	return backend.Chain(b,
		w.tracing(a),     // the worker's span of the call (trace.go)
		w.fallback(a, g), // another API, the last good response, or a static one
	)
}

// acquire returns the API's current state with its backend instance
// counted as in use (release it with st.held.release), or nil when the
// instance is retired for good: the API has left this worker.
func (as *apiSub) acquire() *apiState {
	for {
		st := as.state.Load()
		if st.held.acquire() {
			return st
		}
		if as.state.Load() == st {
			return nil
		}
	}
}

// retireWhenDrained retires an API's backend instance once its drained
// subscription has handed out its last message: until then a message
// still calls it.
func retireWhenDrained(sub *nats.Subscription, h *held) {
	for sub.IsValid() {
		time.Sleep(10 * time.Millisecond)
	}
	h.retire()
}

// dispatch runs in the subscription's callback goroutine. It must never
// block: it admits the call (or refuses it at once) and hands it to its own
// goroutine, so one slow backend call never holds up the next message. The
// per-API concurrency limit bounds those goroutines.
func (w *Worker) dispatch(as *apiSub, m *nats.Msg) {
	if !bus.IsReplyInbox(m.Reply) {
		// Nobody waits for an answer, or the sender named a subject that
		// is no inbox (a control subject) for the answer to be published
		// on: never answer there.
		return
	}
	wire, err := bus.WireOf(m.Header)
	w.wireIn[wire].Add(1)
	if err != nil {
		// Written by a node more than a release apart: nothing in it
		// can be trusted to mean what this worker would read. The
		// refusal says which versions it reads; the sender retries.
		if err := m.RespondMsg(bus.WireRefusal(err, m.Header.Get(bus.HdrRequestID))); err != nil {
			w.log.Warn("sending error reply", "subject", m.Subject, "err", err)
		}
		return
	}
	inv, err := w.admit(as, bus.RequestDeadline(m.Header))
	if err == errExpired {
		return // the caller has given up already
	}
	if err != nil {
		code, msg := errorCode(err)
		w.replyError(m, m.Header.Get(bus.HdrRequestID), code, msg)
		return
	}
	select {
	case w.calls <- admitted{inv, m}:
	default:
		w.spawned.Add(1)
		go w.runCalls(admitted{inv, m})
	}
}

// WireRequests counts the requests received so far by wire version ("1",
// "2", ...; "unread" for versions this worker does not read).
func (w *Worker) WireRequests() map[string]int64 {
	out := make(map[string]int64, len(w.wireIn))
	for v := range w.wireIn {
		name := strconv.Itoa(v)
		if v == 0 {
			name = "unread"
		}
		out[name] = w.wireIn[v].Load()
	}
	return out
}

// runCalls serves a call, then the next ones dispatch hands it, until it
// has waited runnerIdle for one or the worker shuts down. Reusing the
// goroutine is what pays: a fresh one per call starts on a small stack
// and grows it (copying) in the HTTP client on every call, about 6 % of
// serve's CPU under load.
func (w *Worker) runCalls(c admitted) {
	idle := time.NewTimer(runnerIdle)
	defer idle.Stop()
	for {
		w.serve(c.inv, c.m)
		idle.Reset(runnerIdle)
		select {
		case c = <-w.calls:
		case <-idle.C:
			return
		case <-w.stopped:
			return
		}
	}
}

// serve is one call over NATS: decode the request, invoke the API's stack,
// reply on the request's inbox. A panic while decoding or replying is
// recovered here (invoke recovers its own); one after the reply went out
// sends no second reply.
func (w *Worker) serve(inv invocation, m *nats.Msg) {
	replied := false
	defer func() {
		if p := recover(); p != nil {
			w.log.Error("panic serving request", "api", inv.st.api.Key(), "panic", p)
			if !replied { // only a panic while decoding: the request id is not known
				w.replyError(m, "", bus.CodeInternal, "internal error in worker")
			}
		}
		inv.end()
	}()
	req := decodeRequest(inv.st.api, m)
	ctx := context.Background()
	var ss *streamSession
	if req.Stream > 0 && bus.IsStreamInbox(m.Reply) {
		// The caller takes a stream: its session is open before the
		// backend is called, so a caller gone even before the first
		// message ends the call (workers/stream.go).
		var stop context.CancelFunc
		ctx, stop = context.WithCancel(ctx)
		defer stop()
		if ss = w.openStream(m, req.Stream, inv.deadline, stop); ss != nil {
			defer ss.close()
		} else {
			req.Stream = 0
		}
	} else {
		req.Stream = 0
	}
	start := time.Now()
	resp, err := inv.invoke(ctx, req)
	replied = true
	if err != nil {
		code, msg := errorCode(err)
		inv.as.stats.record(time.Since(start), true, string(code)+": "+msg)
		w.replyErrorBy(m, req.RequestID, code, msg, inv.deadline)
		return
	}
	if failed := failure(resp, nil) != ""; failed {
		inv.as.stats.record(time.Since(start), true, "backend answered "+strconv.Itoa(resp.Status))
	} else {
		inv.as.stats.record(time.Since(start), false, "")
	}
	if resp.Stream != nil {
		if ss != nil {
			ss.relay(resp)
		} else { // an adapter streamed unasked: a bug, answered as one
			// Run to no one, so that what waits for its end (a
			// breaker's record, a span) ends.
			_ = resp.Stream(func([]byte) error { return errors.New("no stream was asked for") })
			w.replyError(m, req.RequestID, bus.CodeInternal, "the backend answered with a stream nobody asked for")
		}
		resp.Free()
		return
	}
	w.reply(m, resp, req.RequestID, inv.deadline)
	resp.Free()
}

// errExpired is admit's answer to a call whose deadline has passed: its
// caller has given up, so nobody is told.
var errExpired = errors.New("the call's deadline has passed")

// invocation is one call of an API admitted on this worker, whatever
// brought it (a NATS request; later an async job): admit takes it in,
// invoke runs the API's stack on its request, end ends it once its
// outcome has been delivered. None of them knows NATS.
type invocation struct {
	w        *Worker
	as       *apiSub
	st       *apiState // the API as the call was admitted; its instance is held for the call
	deadline time.Time
	cancel   context.CancelFunc // the deadline's, once invoke has set it
}

// admit takes a call of the API in, or refuses it at once: a *bus.Error
// when the API has left this worker or has as many calls in flight as it
// may, errExpired when the call's deadline has passed. sent is the
// deadline the sender set (zero: none); the call never gets more than the
// API's own timeout from now, whatever the sender's clock says. An
// admitted call holds its API's backend instance and counts as in flight
// until end.
func (w *Worker) admit(as *apiSub, sent time.Time) (invocation, error) {
	return w.admitAt(as, sent, true)
}

// admitUntil is admit for an async job's attempt, whose deadline is its
// own (the API's attempt_timeout), not capped by the API's timeout.
func (w *Worker) admitUntil(as *apiSub, deadline time.Time) (invocation, error) {
	return w.admitAt(as, deadline, false)
}

func (w *Worker) admitAt(as *apiSub, sent time.Time, capped bool) (invocation, error) {
	st := as.acquire()
	if st == nil {
		return invocation{}, bus.Errorf(bus.CodeNoWorkers, "the api is no longer served by this worker")
	}
	now := time.Now()
	deadline := now.Add(st.timeout)
	if !sent.IsZero() && (sent.Before(deadline) || !capped) {
		deadline = sent
	}
	if !deadline.After(now) {
		st.held.release()
		w.dropped.Add(1)
		return invocation{}, errExpired
	}
	if as.inflight.Add(1) > st.limit {
		as.inflight.Add(-1)
		st.held.release()
		return invocation{}, bus.Errorf(bus.CodeOverloaded, fmt.Sprintf("api %s has %d calls in flight on this worker", st.api.Key(), st.limit))
	}
	w.inflight.Add(1)
	return invocation{w: w, as: as, st: st, deadline: deadline}, nil
}

// invoke calls the API's stack with req within the call's deadline and
// returns its response (freed by the caller once sent) or error. A panic
// in the stack is recovered as an INTERNAL error.
func (inv *invocation) invoke(ctx context.Context, req *backend.Request) (resp *backend.Response, err error) {
	defer func() {
		if p := recover(); p != nil {
			inv.w.log.Error("panic serving request", "api", inv.st.api.Key(), "panic", p)
			resp, err = nil, bus.Errorf(bus.CodeInternal, "internal error in worker")
		}
	}()
	ctx, inv.cancel = context.WithDeadline(ctx, inv.deadline)
	return inv.st.backend(ctx, req)
}

// end ends an admitted call: its deadline, its place in flight and its
// hold on the instance, which closes now if it was retired meanwhile.
func (inv *invocation) end() {
	if inv.cancel != nil {
		inv.cancel()
	}
	inv.as.inflight.Add(-1)
	inv.w.inflight.Add(-1)
	inv.st.held.release()
}

// errorCode is the code and message a failed call is answered with: a
// gateway-made error's own, else BAD_GATEWAY.
func errorCode(err error) (bus.Code, string) {
	if ge, ok := err.(*bus.Error); ok {
		return ge.Code, ge.Message
	}
	return bus.CodeBadGateway, err.Error()
}

// decodeRequest takes the wire metadata out of the message headers; what is
// left are the HTTP request headers for the backend.
func decodeRequest(a *registry.API, m *nats.Msg) *backend.Request {
	meta := bus.DecodeRequest(m.Header)
	app := meta.App
	req := &backend.Request{
		API:       a,
		Method:    meta.Method,
		Path:      meta.Path,
		RawQuery:  meta.RawQuery,
		RawParams: meta.RawParams,
		RequestID: meta.RequestID,
		ClientIP:  meta.ClientIP,
		App:       app,
		Host:      meta.Host,
		Body:      m.Data,
		Stream:    meta.Stream,
	}
	hh := http.Header(m.Header)
	bus.CleanHeaders(hh)
	// Backends learn the authenticated app from X-Jetway-App, and that the
	// call is a sandbox call from X-Jetway-Sandbox, which only Jetway sets:
	// a caller's own values never get through.
	delete(hh, "X-Jetway-App")
	delete(hh, "X-Jetway-Sandbox")
	if app != "" {
		hh["X-Jetway-App"] = []string{app}
	}
	if a.ForSandbox() {
		hh["X-Jetway-Sandbox"] = []string{"true"}
	}
	req.Header = hh
	return req
}

// reply sends a backend's response: status and headers as NATS headers,
// the body as it is; a response NATS refuses becomes BAD_GATEWAY. A
// connection lost meanwhile delays it to the next one, until deadline.
func (w *Worker) reply(m *nats.Msg, resp *backend.Response, requestID string, deadline time.Time) {
	rb := replyBufs.Get().(*replyBuf)
	h := rb.h
	for k, vs := range resp.Header { // a copy: resp's map may be shared (a cached response)
		h[k] = vs
	}
	if resp.Channel != "" {
		h[channelHeader] = []string{resp.Channel}
	}
	bus.CleanHeaders(h)
	bus.EncodeReply(h, resp.Status)
	if resp.Classified {
		bus.SetOutcome(h, resp.Failed)
	}
	rb.msg = nats.Msg{Header: h, Data: resp.Body}
	err := w.o.Link.Respond(m, &rb.msg, deadline)
	if len(h) <= 32 { // a map grown by a reply with many headers is not kept
		clear(h)
		rb.msg = nats.Msg{}
		replyBufs.Put(rb)
	}
	if err != nil {
		w.log.Warn("sending reply", "subject", m.Subject, "err", err)
		if !errors.Is(err, nats.ErrConnectionClosed) && !errors.Is(err, nats.ErrConnectionDraining) {
			// The response itself could not go (over the max payload, a
			// header NATS cannot carry): the caller learns it now, not
			// at the deadline.
			w.replyError(m, requestID, bus.CodeBadGateway, "the backend's response could not be sent over NATS: "+err.Error())
		}
	}
}

// replyBuf is a reply's header map and message, reused from call to call:
// RespondMsg has written both out by the time it returns.
type replyBuf struct {
	h   nats.Header
	msg nats.Msg
}

var replyBufs = sync.Pool{New: func() any { return &replyBuf{h: make(nats.Header, 8)} }}

// replyError sends a gateway-made error. requestID is passed in because
// decodeRequest strips the wire headers from m.
func (w *Worker) replyError(m *nats.Msg, requestID string, code bus.Code, msg string) {
	w.replyErrorBy(m, requestID, code, msg, time.Time{})
}

// replyErrorBy is replyError for the answer of an admitted call, which a
// lost connection delays to the next one, until deadline.
func (w *Worker) replyErrorBy(m *nats.Msg, requestID string, code bus.Code, msg string, deadline time.Time) {
	if err := w.o.Link.Respond(m, bus.ErrorReply(code, msg, requestID), deadline); err != nil {
		w.log.Warn("sending error reply", "subject", m.Subject, "err", err)
	}
}

// InFlight is the number of calls being served.
func (w *Worker) InFlight() int64 { return w.inflight.Load() }

// Dropped is the number of requests dropped because they arrived after
// their deadline.
func (w *Worker) Dropped() int64 { return w.dropped.Load() }

// Subscribed lists the API tiers (API.Key) the worker currently serves.
func (w *Worker) Subscribed() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	names := make([]string, 0, len(w.subs))
	for n := range w.subs {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// OpenBreakers lists the API tiers (API.Key) whose breaker is not closed
// on this worker now, sorted: what its heartbeats say.
func (w *Worker) OpenBreakers(now time.Time) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for key, as := range w.subs {
		if st := as.state.Load(); st != nil && st.breaker != nil && st.breaker.State(now) != resilience.StateClosed {
			out = append(out, key)
		}
	}
	slices.Sort(out)
	return out
}

// Shutdown stops taking new requests (draining every subscription, so
// messages already delivered are still served) and waits until the calls in
// flight finish or ctx ends.
func (w *Worker) Shutdown(ctx context.Context) error {
	w.mu.Lock()
	w.closing = true
	w.stopOnce.Do(func() { close(w.stopped) })
	for _, s := range append(w.breakers, w.micro...) {
		_ = s.Unsubscribe()
	}
	subs := make([]*nats.Subscription, 0, len(w.subs))
	helds := make([]*held, 0, len(w.subs))
	for _, as := range w.subs {
		subs = append(subs, as.sub)
		helds = append(helds, as.gov.backend.Value())
		_ = as.sub.Drain()
	}
	w.subs = map[string]*apiSub{}
	w.poolSubs.Store(nil)
	for p, jp := range w.jobPools {
		jp.stop() // no new jobs; the running ones count in flight
		delete(w.jobPools, p)
	}
	w.mu.Unlock()
	w.waitChannels(ctx) // the controllers' leases given up before the connection goes
	// The instances close as their last calls end, now or later.
	defer func() {
		for _, h := range helds {
			h.retire()
		}
	}()
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		busy := w.inflight.Load() > 0
		for _, s := range subs {
			busy = busy || s.IsValid()
		}
		if !busy {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("worker shutdown: %d calls still in flight: %w", w.inflight.Load(), ctx.Err())
		case <-t.C:
		}
	}
}

// Serving reports the registry revision of the API definition the worker
// is serving (false when it does not serve the API).
func (w *Worker) Serving(api string) (revision uint64, ok bool) {
	w.mu.Lock()
	as := w.subs[api]
	w.mu.Unlock()
	if as == nil {
		return 0, false
	}
	return as.state.Load().api.Revision, true
}
