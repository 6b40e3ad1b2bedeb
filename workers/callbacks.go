package workers

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/sign"
)

// Callbacks (docs/async.md#callbacks). When a job ends, the worker that
// ended it sends one callback message per destination — the caller's
// X-Callback-Url, the API's on_success or on_failure — into the jobs
// stream on jetway.jobs.<pool>.callback.<api>, before it acks the job: a
// callback is as durable as the job. The pool's workers take them from the
// same consumer and deliver each with its own retries, then write how it
// went into the job's status. The job's own state never changes with its
// callbacks'.

// callbackTargets are the destinations of a job that ended in state:
// the caller's URL, then the API's own.
func callbackTargets(m jetstream.Msg, cfg *registry.Callbacks, state string) []registry.Destination {
	var out []registry.Destination
	if u := m.Headers().Get(bus.HdrCallbackURL); u != "" {
		out = append(out, registry.Destination{URL: u})
	}
	if cfg == nil {
		return out
	}
	switch {
	case state == registry.JobSucceeded && cfg.OnSuccess != nil:
		out = append(out, *cfg.OnSuccess)
	case (state == registry.JobFailed || state == registry.JobDead) && cfg.OnFailure != nil:
		out = append(out, *cfg.OnFailure)
	}
	return out
}

// destinationName is how a destination shows in a job's status.
func destinationName(d registry.Destination) string {
	if d.URL != "" {
		return d.URL
	}
	return "nats:" + d.Subject
}

// sendCallbacks stores a finished job's callback messages, one per
// destination, whose body is the final status. Called with the status
// written and before the job's ack; a failure is logged (the job's end
// stands).
func (j *job) sendCallbacks(targets []registry.Destination) {
	if len(targets) == 0 {
		return
	}
	st, m := j.st, j.m
	body, err := json.Marshal(st)
	if err != nil {
		return
	}
	_, tier, name, _ := bus.ParseJobSubject(m.Subject())
	for i, d := range targets {
		h := nats.Header{}
		h.Set(bus.HdrJobID, st.ID)
		h.Set(jetstream.MsgIDHeader, "cb."+st.ID+"."+strconv.Itoa(i)+"."+j.seq())
		h.Set(hdrCallbackIndex, strconv.Itoa(i))
		h.Set(hdrCallbackTier, tier)
		if d.URL != "" {
			h.Set(bus.HdrCallbackURL, d.URL)
		} else {
			h.Set(bus.HdrCallbackSubject, d.Subject)
		}
		if k := m.Headers().Get(bus.HdrCallbackKey); k != "" {
			h.Set(bus.HdrCallbackKey, k)
		}
		out := &nats.Msg{Subject: bus.JobSubject(st.Pool, bus.TierCallback, name), Header: h, Data: body}
		if _, err := j.w.js.PublishMsg(j.ctx, out); err != nil {
			j.w.log.Error("async job's callback not stored", "job", st.ID, "to", destinationName(d), "err", err)
		}
	}
}

// Headers of a callback message besides bus's: its place among the job's
// callbacks, and the tier of the API whose job it is.
const (
	hdrCallbackIndex = "Jetway-Callback-Index"
	hdrCallbackTier  = "Jetway-Callback-Tier"
)

// runCallback delivers one callback message: an attempt, then an ack, a
// nak with the backoff, or — its attempts spent — a dead letter.
func (w *Worker) runCallback(m jetstream.Msg, name string) {
	h := m.Headers()
	id := h.Get(bus.HdrJobID)
	idx, err := strconv.Atoi(h.Get(hdrCallbackIndex))
	if !registry.ValidJobID(id) || err != nil || idx < 0 || idx > 8 {
		w.log.Warn("async job callback malformed; dropped", "subject", m.Subject(), "job", id)
		_ = m.Term()
		return
	}
	cfg := w.callbackConfig(name, h.Get(hdrCallbackTier))
	attempt := 1
	if md, err := m.Metadata(); err == nil {
		attempt = int(md.NumDelivered)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(cfg.Timeout)+5*time.Second)
	defer cancel()
	stop := (&job{m: m}).keepInProgress(w.o.JobAckWait / 3) // a slow receiver is not delivered to twice
	err = allowedTarget(h, cfg)
	if err == nil {
		err = w.deliverCallback(ctx, m, cfg)
	} else {
		attempt = cfg.Attempts // a target the API does not allow now is not tried again
	}
	stop()
	state := registry.CallbackDelivered
	switch {
	case err == nil:
	case attempt < cfg.Attempts:
		state = registry.CallbackPending
	default:
		state = registry.CallbackFailed
	}
	w.noteCallback(ctx, id, idx, attempt, state, err)
	c := w.jobCount(jobKey(name, h.Get(hdrCallbackTier)))
	switch state {
	case registry.CallbackDelivered:
		c.callbacksDelivered.Add(1)
	case registry.CallbackPending:
		c.callbacksRetried.Add(1)
	default:
		c.callbacksFailed.Add(1)
	}
	switch state {
	case registry.CallbackPending:
		d := time.Duration(cfg.Backoff)
		for i := 1; i < attempt && d < time.Duration(cfg.MaxBackoff); i++ {
			d *= 2
		}
		_ = m.NakWithDelay(min(d, time.Duration(cfg.MaxBackoff)))
		return
	case registry.CallbackFailed:
		w.deadCallback(ctx, m, attempt, err)
	}
	_ = m.Ack()
}

// allowedTarget checks a callback message's target against its API as
// this worker serves it now: one of the API's own destinations, or a URL
// its allowlist takes. A message names its target, and an edge's user
// could have written one: a worker never sends where the API does not
// say it may.
func allowedTarget(h nats.Header, cfg *registry.Callbacks) error {
	subj, u := h.Get(bus.HdrCallbackSubject), h.Get(bus.HdrCallbackURL)
	for _, d := range []*registry.Destination{cfg.OnSuccess, cfg.OnFailure} {
		if d != nil && ((subj != "" && d.Subject == subj) || (u != "" && d.URL == u)) {
			return nil
		}
	}
	if u != "" {
		if _, err := cfg.CallbackURL(u); err == nil {
			return nil
		}
	}
	return fmt.Errorf("the callback's target is not one its API allows (now)")
}

// callbackConfig is the callback policy of an API tier as this worker
// serves it, or the defaults.
func (w *Worker) callbackConfig(name, tier string) *registry.Callbacks {
	if a := w.asyncOf(name, tier); a != nil && a.Callbacks != nil {
		return a.Callbacks
	}
	return defaultCallbacks
}

var defaultCallbacks = registry.DefaultCallbacks()

// deliverCallback sends a callback once: a signed POST of the job's final
// status to a URL, or a publish on a service subject.
func (w *Worker) deliverCallback(ctx context.Context, m jetstream.Msg, cfg *registry.Callbacks) error {
	h := m.Headers()
	var st struct {
		State string `json:"state"`
		App   string `json:"app"`
	}
	_ = json.Unmarshal(m.Data(), &st)
	if subj := h.Get(bus.HdrCallbackSubject); subj != "" {
		out := &nats.Msg{Subject: subj, Data: m.Data(), Header: nats.Header{}}
		out.Header.Set(sign.CallbackJobHeader, h.Get(bus.HdrJobID))
		out.Header.Set(sign.CallbackStateHeader, st.State)
		if err := w.o.Conn.PublishMsg(out); err != nil {
			return err
		}
		return w.o.Conn.FlushWithContext(ctx)
	}
	u := h.Get(bus.HdrCallbackURL)
	ctx, cancel := context.WithTimeout(ctx, time.Duration(cfg.Timeout))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(m.Data()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "jetway-callback")
	req.Header.Set(sign.CallbackJobHeader, h.Get(bus.HdrJobID))
	req.Header.Set(sign.CallbackStateHeader, st.State)
	if k := h.Get(bus.HdrCallbackKey); k != "" && st.App != "" {
		key, err := base64.RawURLEncoding.DecodeString(k)
		if err != nil {
			return fmt.Errorf("the job's callback key is damaged")
		}
		if err := sign.SignCallback(req, m.Data(), st.App, key); err != nil {
			return err
		}
	}
	client := w.publicCallbacks
	if cfg.AllowPrivate {
		client = w.anyCallbacks
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("the receiver answered %d", resp.StatusCode)
	}
	return nil
}

// noteCallback writes how a callback went into its job's status (when the
// status is still kept).
func (w *Worker) noteCallback(ctx context.Context, id string, idx, attempt int, state string, cause error) {
	jobs := w.jobs
	for range 5 {
		st, err := jobs.Get(ctx, id)
		if err != nil || idx >= len(st.Callbacks) {
			return
		}
		c := &st.Callbacks[idx]
		c.State, c.Attempts, c.LastError = state, attempt, ""
		if cause != nil {
			c.LastError = cause.Error()
		}
		ttl := registry.DefaultAsyncAge
		if as := w.asyncOf(st.API, st.Tier); as != nil {
			ttl = time.Duration(as.ResultTTL)
		}
		if err := jobs.Update(ctx, st, ttl); !errors.Is(err, registry.ErrJobConflict) {
			return
		}
	}
}

// asyncOf is the async block of an API tier this worker serves (nil: not
// served).
func (w *Worker) asyncOf(name, tier string) *registry.Async {
	w.mu.Lock() // not on a call's path: a job's end, a callback
	as := w.subs[jobKey(name, tier)]
	w.mu.Unlock()
	if as == nil {
		return nil
	}
	return as.state.Load().api.Async
}

// deadCallback records a callback whose attempts are spent in the dead
// letters (reason callback_failed), so that it can be replayed.
func (w *Worker) deadCallback(ctx context.Context, m jetstream.Msg, attempts int, cause error) {
	h := nats.Header{}
	for k, vs := range m.Headers() {
		h[k] = vs
	}
	seq := "0"
	if md, err := m.Metadata(); err == nil {
		seq = strconv.FormatUint(md.Sequence.Stream, 10)
	}
	h.Set(jetstream.MsgIDHeader, "dlq.cb."+m.Headers().Get(bus.HdrJobID)+"."+m.Headers().Get(hdrCallbackIndex)+"."+seq)
	h.Set(registry.HdrDeadReason, registry.ReasonCallback)
	h.Set(registry.HdrDeadState, registry.CallbackFailed)
	h.Set(registry.HdrDeadAttempts, strconv.Itoa(attempts))
	if cause != nil {
		h.Set(registry.HdrDeadError, truncate(cause.Error(), 1024))
	}
	tok, _, name, _ := bus.ParseJobSubject(m.Subject())
	out := &nats.Msg{Subject: bus.DeadLetterPrefix + tok + "." + bus.TierCallback + "." + name, Header: h, Data: m.Data()}
	if _, err := w.js.PublishMsg(ctx, out); err != nil {
		w.log.Error("async job callback's dead letter not written", "job", m.Headers().Get(bus.HdrJobID), "err", err)
	}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// callbackClients are the HTTP clients of callbacks: one that reaches
// public addresses only — checked on every connection, after the name is
// resolved, so that no name can point a callback inside the network — and
// one for APIs that allow private addresses. Neither follows redirects
// (a receiver's redirect would be a way around the allowlist) or uses a
// proxy from the environment.
func callbackClients() (public, any *http.Client) {
	mk := func(control func(network, address string, c syscall.RawConn) error) *http.Client {
		d := &net.Dialer{Timeout: 5 * time.Second, Control: control}
		tr := &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 4, IdleConnTimeout: 30 * time.Second,
			TLSHandshakeTimeout: 5 * time.Second, ResponseHeaderTimeout: registry.MaxCallbackTimeout, ForceAttemptHTTP2: true}
		return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	public = mk(func(_, address string, _ syscall.RawConn) error {
		host, _, err := net.SplitHostPort(address)
		if err != nil {
			return err
		}
		if ip := net.ParseIP(host); ip == nil || !registry.PublicIP(ip) {
			return fmt.Errorf("callback refused: %s is not a public address (the API's callbacks may allow_private)", host)
		}
		return nil
	})
	return public, mk(nil)
}
