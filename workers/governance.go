package workers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetway-gw/jetway/backend"
	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/resilience"
)

// BreakerSubjectPrefix starts the subject a breaker change of an API is
// published on: jetway.breaker.<pool>.<api> (bus.BreakerSubject). Every
// worker of the pool applies the changes of the others, and anything else
// (alerts, dashboards) can listen.
const BreakerSubjectPrefix = bus.BreakerPrefix

// BreakerEvent is a breaker change as published on NATS.
type BreakerEvent struct {
	API       string    `json:"api"`
	Backend   string    `json:"backend"`
	Node      string    `json:"node"`
	From      string    `json:"from"`
	To        string    `json:"to"`
	Reason    string    `json:"reason"`
	At        time.Time `json:"at"`
	OpenFor   string    `json:"open_for,omitempty"`
	OpenUntil time.Time `json:"open_until,omitzero"`
	Gen       uint64    `json:"gen"`
}

// governance is the per-API state that must outlive registry snapshots: a
// backend instance keeps its connections, a breaker its state, a budget its
// window, a cache its entries, for as long as their configuration is
// unchanged.
type governance struct {
	backend resilience.Kept[*held]
	breaker resilience.Kept[*resilience.Breaker]
	budget  resilience.Kept[*resilience.RetryBudget]
	cache   resilience.Kept[*resilience.LastGood]
	// A channel set's: each channel's breaker, and the budget its
	// failovers spend (the retry policy's, else the default).
	chanBreakers resilience.KeptMap[string, *resilience.Breaker]
	chanBudget   resilience.Kept[*resilience.RetryBudget]
}

// channelBreaker is the breaker of one channel, kept while the API's
// breaker policy is unchanged (nil if the policy cannot build one). The
// caller starts a round of chanBreakers per build.
func (g *governance) channelBreaker(channel string, cfg resilience.BreakerConfig) *resilience.Breaker {
	br, _ := g.chanBreakers.Get(channel, resilience.Fingerprint(cfg), func() (*resilience.Breaker, error) {
		return resilience.NewBreaker(cfg)
	})
	return br
}

// channelFailoverBudget is the budget of a channel set's failovers when
// the API's retry policy sets none: every call may fail over once (the
// backup then takes at most the failing channel's share on top of its
// own), and no more — a failover tries another channel, never the same
// one again, so it cannot turn into a storm on the channel that fails.
var channelFailoverBudget = resilience.RetryBudgetConfig{Ratio: 1, MinPerSecond: 10}

// channelBudget is the retry budget a channel set's failovers spend: the
// retry policy's, else channelFailoverBudget.
func (g *governance) channelBudget(a *registry.API) *resilience.RetryBudget {
	cfg := channelFailoverBudget
	if a.Retry != nil && a.Retry.Budget != nil {
		cfg = a.Retry.BudgetConfig()
	}
	b, err := g.chanBudget.Get(resilience.Fingerprint(cfg), func() (*resilience.RetryBudget, error) {
		return resilience.NewRetryBudget(cfg)
	})
	if b == nil || err != nil { // checked at publish; the default stands in
		b, _ = resilience.NewRetryBudget(channelFailoverBudget)
	}
	return b
}

// instance returns the API's backend instance: the one held while its
// backend spec is unchanged, else a new one (the caller retires the old).
// A failed build stands in (its calls get BAD_GATEWAY) but is not kept:
// the next registry change tries again.
func (w *Worker) instance(a *registry.API, g *governance) *held {
	fp, hold := resilience.Fingerprint(a.Backend), w.hold
	if a.HasChannels() {
		fp, hold = channelsFingerprint(a), w.holdChannels
	}
	h, _ := g.backend.Get(fp, func() (*held, error) { return hold(a), nil })
	if h.inst == nil {
		g.backend.Forget()
	}
	return h
}

// failure classifies a backend result: "" for success, else the retry or
// fallback condition it meets.
func failure(resp *backend.Response, err error) string {
	if err != nil {
		var ge *bus.Error
		if errors.As(err, &ge) {
			switch ge.Code {
			case bus.CodeBadRequest, bus.CodePayloadTooLarge:
				// The caller's request does not fit the backend (a body
				// that is not the gRPC message): nothing was sent, and
				// the backend is not to blame.
				return ""
			case bus.CodeGatewayTimeout:
				return registry.RetryOnTimeout
			case bus.CodeCircuitOpen:
				return registry.FallbackOnCircuitOpen
			case bus.CodeBadGateway:
				return registry.RetryOnConnect
			}
		}
		return registry.RetryOnConnect
	}
	if resp.Classified {
		if resp.Failed {
			return registry.RetryOn5xx
		}
		return ""
	}
	if resp.Status >= 500 || resp.Failed {
		return registry.RetryOn5xx
	}
	return ""
}

// breaker fails calls fast while the backend's circuit is open, records
// every outcome, and publishes state changes for the rest of the pool. The
// breaker is kept while its policy is unchanged; nil without a policy.
func (w *Worker) breaker(a *registry.API, g *governance) backend.Middleware {
	bc := a.Breaker
	if bc == nil {
		g.breaker.Clear()
		return nil
	}
	br, err := g.breaker.Get(resilience.Fingerprint(bc.Config()), func() (*resilience.Breaker, error) {
		return resilience.NewBreaker(bc.Config())
	})
	if err != nil { // the breaker of the last settings, if any, stays
		w.log.Warn("breaker not applied", "api", a.Name, "err", err)
	}
	if br == nil {
		return nil
	}
	// A draft's breaker events name its key (<name>@draft), which no
	// production breaker takes.
	name, pool, label := a.Key(), a.Pool, a.Backend.Label()
	shared := bc.IsShared()
	return func(next backend.Backend) backend.Backend {
		return func(ctx context.Context, req *backend.Request) (*backend.Response, error) {
			tk := br.Allow(time.Now())
			if !tk.OK {
				return nil, bus.Errorf(bus.CodeCircuitOpen, fmt.Sprintf("circuit open for the backend of api %s (%s); retry in %v", name, tk.Refusal, tk.RetryAfter.Round(time.Millisecond)))
			}
			start := time.Now()
			done := false
			defer func() {
				if !done { // the backend panicked: a failure, or a probe stays out for ever
					end := time.Now()
					if tr, changed := br.Record(tk, end, end.Sub(start), true); changed {
						w.publishBreaker(pool, name, label, tr, shared)
					}
				}
			}()
			resp, err := next(ctx, req)
			done = true
			if errors.Is(ctx.Err(), context.Canceled) && (resp == nil || resp.Stream == nil) {
				// The caller left before any answer (a relayed stream's
				// edge gone): that says nothing of the backend.
				br.Cancel(tk)
				return resp, err
			}
			record := func(failed bool) {
				end := time.Now()
				if tr, changed := br.Record(tk, end, end.Sub(start), failed); changed {
					w.publishBreaker(pool, name, label, tr, shared)
				}
			}
			if resp != nil && resp.Stream != nil && failure(resp, err) == "" {
				// The head was good: how the stream ends decides. A
				// backend that fails mid-stream, or runs out the
				// deadline, failed; one that ends succeeded; a caller or
				// edge gone says nothing of the backend.
				resp.AfterStream(func(serr error) {
					var se *backend.StreamError
					switch {
					case errors.As(serr, &se):
						record(failure(&backend.Response{Status: se.Status}, nil) != "")
					case errors.Is(serr, context.DeadlineExceeded):
						record(true)
					case serr == nil:
						record(false)
					default:
						br.Cancel(tk)
					}
				})
				return resp, err
			}
			record(failure(resp, err) != "")
			return resp, err
		}
	}
}

func (w *Worker) publishBreaker(pool, api, label string, tr resilience.Transition, shared bool) {
	w.log.Warn("breaker changed", "api", api, "from", tr.From, "to", tr.To, "reason", tr.Reason)
	ev := BreakerEvent{API: api, Backend: label, Node: w.id, From: tr.From.String(), To: tr.To.String(),
		Reason: tr.Reason, At: tr.At, OpenUntil: tr.OpenUntil, Gen: tr.Gen}
	if tr.OpenFor > 0 {
		ev.OpenFor = tr.OpenFor.String()
	}
	b, _ := json.Marshal(ev)
	msg := &nats.Msg{Subject: bus.BreakerSubject(pool, api), Data: b, Header: nats.Header{}}
	if !shared {
		msg.Header.Set("Jetway-Breaker-Local", "1")
	}
	if err := w.o.Conn.PublishMsg(msg); err != nil {
		w.log.Warn("publishing breaker change", "api", api, "err", err)
	}
}

// maxBreakerEvent bounds a breaker event a worker reads.
const maxBreakerEvent = 16 << 10

// onBreakerEvent applies another worker's breaker change to this worker's
// breaker of the same API. Only an event on the subject of the API's pool in
// the current snapshot counts: NATS lets only that pool's workers publish
// there, so a node of another pool (or an edge) cannot trip this circuit.
// What the event may set is bounded by the API's policy (Breaker.Apply).
func (w *Worker) onBreakerEvent(m *nats.Msg) {
	var ev BreakerEvent
	if len(m.Data) > maxBreakerEvent || json.Unmarshal(m.Data, &ev) != nil || ev.Node == w.id || m.Header.Get("Jetway-Breaker-Local") != "" {
		return
	}
	w.mu.Lock()
	as := w.subs[ev.API]
	w.mu.Unlock()
	if as == nil {
		return
	}
	st := as.state.Load()
	if st.breaker == nil || !st.api.Breaker.IsShared() {
		return
	}
	if m.Subject != bus.BreakerSubject(st.api.Pool, ev.API) {
		w.log.Warn("breaker change ignored: not from the api's pool", "api", ev.API, "pool", st.api.Pool, "subject", m.Subject, "from_node", ev.Node)
		return
	}
	var to resilience.State
	if to.UnmarshalText([]byte(ev.To)) != nil {
		return
	}
	openFor, _ := time.ParseDuration(ev.OpenFor)
	if st.breaker.Apply(resilience.Transition{To: to, Reason: ev.Reason, At: ev.At, OpenFor: openFor, OpenUntil: ev.OpenUntil, Gen: ev.Gen}, time.Now()) {
		w.log.Info("breaker change from the pool applied", "api", ev.API, "to", ev.To, "from_node", ev.Node, "reason", ev.Reason)
	}
}

// retry retries what the policy allows, within the call's deadline and the
// API's retry budget, with full-jitter backoff. The budget is kept while
// its policy is unchanged; nil without a policy.
func (w *Worker) retry(a *registry.API, g *governance) backend.Middleware {
	r := a.Retry
	if r == nil {
		return nil
	}
	budget, err := g.budget.Get(resilience.Fingerprint(r.Budget), func() (*resilience.RetryBudget, error) {
		return resilience.NewRetryBudget(r.BudgetConfig())
	})
	if err != nil { // the budget of the last settings, if any, stays
		w.log.Warn("retry budget not applied", "api", a.Name, "err", err)
	}
	if budget == nil {
		return nil
	}
	attemptTimeout := time.Duration(r.AttemptTimeout)
	if attemptTimeout <= 0 {
		attemptTimeout = a.TimeoutOrDefault()
	}
	floor := time.Duration(r.MinAttempt)
	if floor <= 0 {
		floor = 10 * time.Millisecond
	}
	base, maxBackoff := time.Duration(r.Backoff), time.Duration(r.MaxBackoff)
	if base <= 0 {
		base = 25 * time.Millisecond
	}
	if maxBackoff <= 0 {
		maxBackoff = 250 * time.Millisecond
	}
	return func(next backend.Backend) backend.Backend {
		return func(ctx context.Context, req *backend.Request) (*backend.Response, error) {
			budget.Deposit(time.Now())
			deadline, _ := ctx.Deadline()
			for attempt := 1; ; attempt++ {
				timeout, ok := resilience.AttemptTimeout(time.Until(deadline), attemptTimeout, floor)
				if !ok {
					return nil, bus.Errorf(bus.CodeGatewayTimeout, "no time left in the deadline for another attempt")
				}
				actx, cancel := context.WithTimeout(ctx, timeout)
				resp, err := next(actx, req)
				if resp != nil && resp.Stream != nil {
					// A stream lives in its attempt's context until it is
					// relayed, and is never retried once it has started.
					resp.AfterStream(func(error) { cancel() })
					return resp, err
				}
				cancel()
				cond := failure(resp, err)
				if cond == "" || cond == registry.FallbackOnCircuitOpen || !r.Retries(cond) ||
					attempt >= r.Attempts || !bus.Idempotent(req.Method, req.Header) || !budget.TryRetry(time.Now()) {
					return resp, err
				}
				pause := resilience.Backoff(attempt, base, maxBackoff, rand.Uint64())
				if time.Until(deadline) < pause+floor {
					// The last outcome stands: no time to wait and try. It
					// goes back whole; the caller sends it, then frees it.
					return resp, err
				}
				resp.Free() // the next attempt's outcome replaces it
				t := time.NewTimer(pause)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					return nil, bus.Errorf(bus.CodeGatewayTimeout, "deadline passed between attempts")
				}
			}
		}
	}
}

// fallback answers a failed call from, in order, another API, the cached
// last good response, or a static response. The cache is kept while its
// size and TTL are unchanged; nil without a policy.
func (w *Worker) fallback(a *registry.API, g *governance) backend.Middleware {
	f := a.Fallback
	if f == nil {
		return nil
	}
	var cache *resilience.LastGood
	if f.Cached {
		cache, _ = g.cache.Get(resilience.Fingerprint([]any{f.CacheEntries, f.CacheTTL}), func() (*resilience.LastGood, error) {
			return resilience.NewLastGood(f.CacheEntries, time.Duration(f.CacheTTL)), nil
		})
	} else {
		g.cache.Clear()
	}
	var static *backend.Response
	if f.Static != nil {
		status, h, body := f.Static.Compile(http.StatusOK)
		h.Set("X-Jetway-Fallback", "static")
		static = &backend.Response{Status: status, Header: h, Body: body}
	}
	return func(next backend.Backend) backend.Backend {
		return func(ctx context.Context, req *backend.Request) (*backend.Response, error) {
			resp, err := next(ctx, req)
			cond := failure(resp, err)
			if cond == "" {
				if cache != nil && resp.Stream == nil && resp.Status < 300 && (req.Method == http.MethodGet || req.Method == http.MethodHead) {
					cache.Put(cacheKey(req), time.Now(), resp.Status, resp.Header, resp.Body)
				}
				return resp, err
			}
			if cond == registry.RetryOnConnect {
				cond = registry.FallbackOn5xx // an unreachable backend is a 5xx for fallbacks
			}
			if !f.Falls(cond) {
				return resp, err
			}
			if f.API != "" && ctx.Err() == nil {
				if fr := w.callAPI(ctx, f.API, req); fr != nil {
					resp.Free()
					return fr, nil
				}
			}
			if cache != nil {
				if c := cache.Get(cacheKey(req), time.Now()); c != nil {
					resp.Free()
					return cachedResponse(c), nil
				}
			}
			if static != nil {
				resp.Free()
				return static, nil
			}
			return resp, err
		}
	}
}

// cachedResponse answers from a cached response, saying so and how old it is.
func cachedResponse(c *resilience.Cached) *backend.Response {
	h := c.Header.Clone()
	h.Set("X-Jetway-Fallback", "cached")
	h.Set("Age", strconv.Itoa(int(time.Since(c.At)/time.Second)))
	return &backend.Response{Status: c.Status, Header: h, Body: c.Body}
}

// callAPI sends the request to another API over NATS within ctx's deadline
// and returns its answer, or nil if it failed too.
func (w *Worker) callAPI(ctx context.Context, api string, req *backend.Request) *backend.Response {
	var target *registry.API
	if s := w.snap.Load(); s != nil {
		target = s.APIs[api]
	}
	if target == nil {
		return nil // not published (the entry was checked at publish, but may be gone)
	}
	// The same request, by the same codec as the edge's: the fallback API's
	// backend learns the caller's app and address like the first one did.
	h := make(nats.Header, len(req.Header)+8)
	for k, v := range req.Header {
		h[k] = v
	}
	dl, _ := ctx.Deadline()
	meta := bus.Meta{Method: req.Method, Path: req.Path, RawQuery: req.RawQuery, RawParams: req.RawParams,
		RequestID: req.RequestID, ClientIP: req.ClientIP, App: req.App, Deadline: dl, Wire: w.o.Wire.Send()}
	bus.EncodeRequest(h, &meta)
	m, err := bus.Request(ctx, w.o.Conn, &nats.Msg{Subject: target.Subject(), Header: h, Data: req.Body}, meta.Wire)
	if err != nil {
		return nil
	}
	rep, err := bus.DecodeReply(m.Header)
	if err != nil || rep.Code != "" || bus.ReplyFailed(rep) {
		return nil // the fallback API's own classify decides, as it would for its callers
	}
	rh := http.Header(m.Header)
	bus.DecodeHTTPHeaders(rh)
	bus.CleanHeaders(rh)
	rh.Set("X-Jetway-Fallback", "api "+api)
	return &backend.Response{Status: rep.Status, Header: rh, Body: m.Data}
}

// cacheKey keys a fallback's last good answers: what the backend got —
// the route parameters too, which a path rewrite at the edge may have
// left out of the path — and the app that asked (one app's answer is
// never another's).
func cacheKey(req *backend.Request) string {
	return req.Method + " " + req.Path + "?" + req.RawQuery + "#" + req.RawParams + "\napp:" + req.App
}

// BreakerState reports the state of an API's breaker on this worker ("",
// false when the worker does not serve the API or the API has none).
func (w *Worker) BreakerState(api string) (string, bool) {
	w.mu.Lock()
	as := w.subs[api]
	w.mu.Unlock()
	if as == nil {
		return "", false
	}
	st := as.state.Load()
	if st.breaker == nil {
		return "", false
	}
	return st.breaker.State(time.Now()).String(), true
}
