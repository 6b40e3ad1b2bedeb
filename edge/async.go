package edge

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/sign"
)

// Async calls (docs/async.md): a call to an API with an async block that
// asks for it (Prefer: respond-async), or every call when the API says
// always, is stored as a job once every edge policy has passed, and
// answered 202 Accepted with the job's address under /_jetway/jobs/.

// isAsync reports whether the call becomes a job.
func (c *call) isAsync() bool {
	as := c.rt.api.Async
	return as != nil && (as.Mode == registry.AsyncAlways || prefersAsync(c.r.Header))
}

// prefersAsync reports whether a request asks Prefer: respond-async
// (RFC 7240: preferences are comma-separated, each with optional
// parameters after ';').
func prefersAsync(h http.Header) bool {
	for _, v := range h["Prefer"] {
		for p := range strings.SplitSeq(v, ",") {
			tok, _, _ := strings.Cut(p, ";")
			if strings.EqualFold(strings.TrimSpace(tok), "respond-async") {
				return true
			}
		}
	}
	return false
}

// maxIdempotencyKey bounds a caller's Idempotency-Key.
const maxIdempotencyKey = 255

// enqueue stores an async call as a job and answers 202 with its address;
// a synchronous call goes on to send.
//
// A job without an Idempotency-Key has a new random id: its pending
// status is written first and the job published with the status's
// revision (bus.HdrJobStatus), so the worker that takes it writes
// "running" without reading the status. A publish that fails removes
// the status again (no one was told the id).
//
// With an Idempotency-Key the job's id is the key's
// (registry.IdempotentJobID), so a repeat finds the job; there the job is
// published before its status is written, so that a status a repeat
// finds always belongs to a job that runs, and a retry of a publish whose
// answer was lost is dropped by the stream's deduplication.
func (c *call) enqueue() error {
	if !c.isAsync() {
		return nil
	}
	c.async = true
	rt, as := c.rt, c.rt.api.Async
	ctx, cancel := context.WithDeadline(c.r.Context(), c.deadline)
	defer cancel()
	jobs := c.e.jobs
	app, user := "", c.tokenUser()
	if c.app != nil {
		app = c.app.app.ID
	}
	id := registry.NewJobID(rt.api.Pool)
	key := c.r.Header.Get("Idempotency-Key")
	if key != "" {
		if len(key) > maxIdempotencyKey || strings.ContainsFunc(key, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return c.refuse(bus.CodeBadRequest, "Idempotency-Key must be 1 to 255 printable characters")
		}
		id = registry.IdempotentJobID(rt.api.Pool, rt.key, app+"\x00"+user, key)
		if st, err := jobs.Get(ctx, id); err == nil {
			return c.accepted(st.ID, st.State) // a repeat: the job it made
		} else if !errors.Is(err, registry.ErrNotFound) {
			c.e.log.Warn("reading a job", "api", rt.api.Name, "request_id", c.id, "err", err)
			return c.refuse(bus.CodeBusUnavailable, "the job store is not reachable from this edge")
		}
	} else {
		// Every attempt carries the same key, so a backend that
		// deduplicates on it runs the job once.
		c.r.Header["Idempotency-Key"] = []string{id}
	}
	cb, err := c.callback(as, id)
	if err != nil {
		return err
	}
	delete(c.r.Header, "Prefer") // the backend is called synchronously, by the worker
	delete(c.r.Header, "X-Callback-Url")
	out := &c.out
	c.requestMsg(c.id, c.deadline, out)
	out.Subject = bus.JobSubject(rt.api.Pool, jobTier(rt.api), rt.api.Name)
	out.Header[bus.HdrJobID] = []string{id}
	if user != "" {
		out.Header[bus.HdrJobUser] = []string{user}
	}
	out.Header[jetstream.MsgIDHeader] = []string{id}
	if cb != nil && cb.url != "" {
		out.Header[bus.HdrCallbackURL] = []string{cb.url}
	}
	if cb != nil && cb.key != "" {
		out.Header[bus.HdrCallbackKey] = []string{cb.key}
	}
	st := &registry.JobStatus{ID: id, API: rt.api.Name, Tier: jobTier(rt.api), Pool: rt.api.Pool, App: app, User: user, RequestID: c.id,
		State: registry.JobPending, MaxAttempts: as.Attempts, Submitted: time.Now().UTC()}
	// Kept while the job may wait in the stream, whatever its API's
	// max_age says then (a status gone would show 404 and let a raised
	// max_age run a job no one could see or cancel).
	ttl := registry.JobKeepAge
	if key == "" {
		if err := jobs.Create(ctx, st, ttl); err != nil {
			return c.statusError(err)
		}
		out.Header[bus.HdrJobStatus] = []string{bus.FormatJobStatus(st.Revision, st.Submitted)}
		if _, err := jobs.Publish(ctx, out); err != nil {
			// Refused by the stream, the job is surely not stored: its
			// status goes (on a context of its own: the caller may have
			// gone). After a timeout it may be stored, and runs with it.
			var ae *jetstream.APIError
			if errors.As(err, &ae) || errors.Is(err, nats.ErrNoResponders) {
				dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
				if derr := jobs.Discard(dctx, st); derr != nil {
					c.e.log.Warn("removing the status of a job not stored", "api", rt.api.Name, "job", id, "request_id", c.id, "err", derr)
				}
				cancel()
			}
			return c.jobError(err)
		}
		return c.accepted(id, registry.JobPending)
	}
	dup, err := jobs.Publish(ctx, out)
	if err != nil {
		return c.jobError(err)
	}
	if dup {
		// The stream took this job (this Idempotency-Key's) within two
		// minutes, and its status is gone already (a short result_ttl):
		// the job ran or runs; a new pending status would never end.
		return c.accepted(id, registry.JobPending)
	}
	// A worker that took the job first wrote its status already
	// (ErrJobExists); any other failure leaves a job that runs, and whose
	// status its worker writes.
	if err := jobs.Create(ctx, st, ttl); err != nil && !errors.Is(err, registry.ErrJobExists) {
		c.e.log.Warn("writing a job's status", "api", rt.api.Name, "job", id, "request_id", c.id, "err", err)
	}
	return c.accepted(id, registry.JobPending)
}

// jobCallback is what a job carries for its callbacks: the caller's URL
// ("": none) and the key they are signed with ("": unsigned).
type jobCallback struct{ url, key string }

// callback reads a caller's X-Callback-Url, which the API must allow and
// whose app must be able to verify it. A job of an API with callbacks,
// by an app with a signing secret, carries the key its callbacks are
// signed with, derived from the app's newest secret and the job's id
// (sign.CallbackKey): the workers that send them never hold the secret.
func (c *call) callback(as *registry.Async, id string) (*jobCallback, error) {
	v := c.r.Header.Get("X-Callback-Url")
	var secrets []registry.HMACSecret
	if c.app != nil {
		secrets = c.app.app.HMACSecrets
	}
	if v == "" && (as.Callbacks == nil || len(secrets) == 0) {
		return nil, nil
	}
	cb := &jobCallback{}
	if v != "" {
		u, err := as.Callbacks.CallbackURL(v)
		if err != nil {
			return nil, c.refuse(bus.CodeBadRequest, err.Error())
		}
		if len(secrets) == 0 {
			return nil, c.refuse(bus.CodeBadRequest, "a callback is signed with the calling app's signing secret, and this caller has none (jetway app rotate-secret)")
		}
		cb.url = u.String()
	}
	if len(secrets) > 0 {
		newest := secrets[0]
		for _, s := range secrets[1:] {
			if s.Created.After(newest.Created) {
				newest = s
			}
		}
		cb.key = base64.RawURLEncoding.EncodeToString(sign.CallbackKey(newest.Bytes(), id))
	}
	return cb, nil
}

// tokenUser is the subject of the token the caller was authenticated by
// ("" for a key, a signature or no authentication): one app's users do
// not share their jobs.
func (c *call) tokenUser() string {
	if c.method != "jwt" || c.app == nil {
		return ""
	}
	return c.user
}

// bearerUser is the subject of a request's bearer token (read before
// authentication verifies the token and takes the header off).
func bearerUser(r *http.Request) string {
	bearer, _ := CutAuthScheme(r.Header.Get("Authorization"), "Bearer")
	user, _ := tokenSubject(strings.TrimSpace(bearer), "sub")
	return user
}

// jobTier is the tier token of an API tier's jobs.
func jobTier(a *registry.API) string {
	switch {
	case a.IsDraft():
		return bus.TierDraft
	case a.IsSandbox():
		return bus.TierSandbox
	}
	return bus.TierAPI
}

// jobError is the refusal of a job the stream did not take.
func (c *call) jobError(err error) error {
	var ae *jetstream.APIError
	if errors.As(err, &ae) && (strings.Contains(ae.Description, "message size") || strings.Contains(ae.Description, "message too large")) {
		return c.refuse(bus.CodePayloadTooLarge, "the job is larger than the jobs stream takes")
	}
	if storeFull(err) {
		// DiscardNew: the API's queue (or the stream, or the server's
		// storage) is full. Nothing was stored.
		return c.full("the job queue of api " + c.rt.api.Name + " is full; try again later")
	}
	c.e.log.Warn("storing a job", "api", c.rt.api.Name, "request_id", c.id, "err", err)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
		return c.refuse(bus.CodeBusUnavailable, "the job store did not answer in time: the job may be stored; retry with the same Idempotency-Key to find out")
	}
	return c.refuse(bus.CodeBusUnavailable, "the job could not be stored")
}

// full refuses a job for want of room in a store: OVERLOADED, to be
// tried again in a few seconds.
func (c *call) full(msg string) error {
	e := c.refuse(bus.CodeOverloaded, msg)
	e.RetryAfter = 5
	return e
}

// storeFull reports whether a stream refused a message for want of room:
// its limits (DiscardNew) or the server's storage.
func storeFull(err error) bool {
	var ae *jetstream.APIError
	if !errors.As(err, &ae) {
		return false
	}
	switch ae.ErrorCode {
	case 10002, 10023, 10028, 10047: // the account's limits; insufficient resources, memory, storage
		return true
	}
	return strings.Contains(ae.Description, "maximum messages") || strings.Contains(ae.Description, "maximum bytes")
}

// statusError is the refusal of a job whose pending status could not be
// written (it is written before the job is stored): nothing was stored.
func (c *call) statusError(err error) error {
	if storeFull(err) {
		return c.full("the job status store is full; try again later")
	}
	c.e.log.Warn("writing a job's status", "api", c.rt.api.Name, "request_id", c.id, "err", err)
	return c.refuse(bus.CodeBusUnavailable, "the job store is not reachable from this edge")
}

// accepted answers an async call: 202, the job's address, and when to
// look.
func (c *call) accepted(id, state string) error {
	loc := BuiltinPrefix + "jobs/" + id
	h := c.Header()
	h["Location"] = []string{loc}
	h["Retry-After"] = []string{"1"}
	h["Preference-Applied"] = []string{"respond-async"}
	h["Content-Type"] = []string{"application/json"}
	h["Cache-Control"] = []string{"no-store"}
	c.WriteHeader(http.StatusAccepted)
	b, _ := json.Marshal(struct {
		ID       string `json:"id"`
		State    string `json:"state"`
		Location string `json:"location"`
	}{id, state, loc})
	_, _ = c.Write(append(b, '\n'))
	return errEnded
}

// serveJob answers /_jetway/jobs/<id> (GET: the job's status; DELETE:
// cancel it while it is pending) and /_jetway/jobs/<id>/result (GET: the
// backend's answer as it was). Only the app that submitted a job may see
// or cancel it, authenticated as its API asks; a job of an open API is
// found by its id alone (128 random bits).
func (e *Edge) serveJob(w http.ResponseWriter, r *http.Request, id, rest, sent string, addr netip.Addr) {
	jobID, sub, _ := strings.Cut(rest, "/")
	switch {
	case sub == "" && (r.Method == http.MethodGet || r.Method == http.MethodHead || r.Method == http.MethodDelete):
	case (sub == "result" || sub == "events") && (r.Method == http.MethodGet || r.Method == http.MethodHead):
	case sub != "" && sub != "result" && sub != "events":
		writeError(w, bus.CodeRouteNotFound, "no built-in endpoint at "+BuiltinPrefix+"jobs/"+rest, id)
		return
	default:
		allow := "GET, HEAD, DELETE"
		if sub != "" {
			allow = "GET, HEAD"
		}
		w.Header().Set("Allow", allow)
		writeError(w, bus.CodeMethodNotAllowed, "a job takes "+allow, id)
		return
	}
	notFound := func() { writeError(w, bus.CodeJobNotFound, "no job "+quoteName(jobID), id) }
	if !registry.ValidJobID(jobID) {
		notFound()
		return
	}
	n := e.inflight.Add(1)
	counted := true
	defer func() {
		if counted {
			e.inflight.Add(-1)
		}
	}()
	if limit := e.o.MaxInFlight; limit > 0 && n > limit {
		writeError(w, bus.CodeOverloaded, "this edge is serving its limit of requests", id)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	jobs := e.jobs
	st, err := jobs.Get(ctx, jobID)
	if errors.Is(err, registry.ErrNotFound) {
		notFound()
		return
	} else if err != nil {
		e.log.Warn("reading a job", "job", jobID, "request_id", id, "err", err)
		writeError(w, bus.CodeBusUnavailable, "the job store is not reachable from this edge", id)
		return
	}
	if st.App != "" {
		p := e.router.Load().auth[st.API]
		if p == nil { // its API is gone, or open now: nobody can prove to be its app
			notFound()
			return
		}
		user := ""
		if p.method(r) == "jwt" {
			user = bearerUser(r) // before Authenticate takes the header off
		}
		app, err := Authenticate(r, p, Caller{Addr: addr, Path: sent})
		if err != nil {
			writeRefusal(w, asError(err), id)
			return
		}
		if app == nil || app.ID != st.App || user != st.User {
			notFound() // another app's (or user's) job is none of its business, not even its existence
			return
		}
	}
	switch {
	case r.Method == http.MethodDelete:
		e.cancelJob(ctx, w, jobs, st, id)
	case sub == "result":
		rctx, rcancel := context.WithTimeout(r.Context(), time.Minute) // a stored result may be megabytes
		e.writeJobResult(rctx, w, jobs, st, id)
		rcancel()
	case sub == "events":
		cancel() // the stream outlives the lookup's timeout
		// A stream lives long: it is no call in flight (it has its own
		// cap), as a push connection is not.
		e.inflight.Add(-1)
		counted = false
		e.jobEvents(w, r, jobs, st, id)
	default:
		_ = writeJSON(w, http.StatusOK, st)
	}
}

// cancelJob cancels a pending job: its worker then dead-letters it
// instead of running it. A running or ended job is not cancelled.
func (e *Edge) cancelJob(ctx context.Context, w http.ResponseWriter, jobs *registry.JobStore, st *registry.JobStatus, id string) {
	for range 3 {
		if st.State != registry.JobPending {
			writeError(w, bus.CodeConflict, "job "+st.ID+" is "+st.State+": only a pending job can be cancelled", id)
			return
		}
		// Kept while the job may still wait in the stream (its worker
		// must read the cancel, or a status gone would let it run): no
		// message outlives MaxAsyncAge from now — counted from now, as a
		// replayed job's message is newer than its submission — and a
		// day after.
		st.State, st.Reason, st.NextAttempt = registry.JobCancelled, registry.ReasonCancelled, nil
		err := jobs.Update(ctx, st, registry.JobKeepAge)
		if err == nil {
			_ = writeJSON(w, http.StatusOK, st)
			return
		}
		if !errors.Is(err, registry.ErrJobConflict) {
			e.log.Warn("cancelling a job", "job", st.ID, "request_id", id, "err", err)
			writeError(w, bus.CodeBusUnavailable, "the job store is not reachable from this edge", id)
			return
		}
		// A worker took it meanwhile: look again.
		if st, err = jobs.Get(ctx, st.ID); err != nil {
			writeError(w, bus.CodeBusUnavailable, "the job store is not reachable from this edge", id)
			return
		}
	}
	writeError(w, bus.CodeConflict, "job "+st.ID+" keeps changing; try again", id)
}

// writeJobResult writes the backend's answer to a finished job as the
// backend gave it: the body kept with the status, or the object that
// keeps a larger one.
func (e *Edge) writeJobResult(ctx context.Context, w http.ResponseWriter, jobs *registry.JobStore, st *registry.JobStatus, id string) {
	res := st.Result
	switch {
	case res == nil:
		writeError(w, bus.CodeJobNotFound, "job "+st.ID+" has no result (it is "+st.State+")", id)
		return
	case res.Omitted:
		writeError(w, bus.CodeJobNotFound, "job "+st.ID+"'s result was larger than its API keeps, and could not be stored", id)
		return
	}
	body := res.RawBody()
	if res.Stored != "" {
		var err error
		body, err = jobs.LoadResult(ctx, res.Stored)
		if errors.Is(err, registry.ErrNotFound) {
			writeError(w, bus.CodeJobNotFound, "job "+st.ID+"'s result has expired", id)
			return
		} else if err != nil {
			e.log.Warn("reading a job's result", "job", st.ID, "request_id", id, "err", err)
			writeError(w, bus.CodeBusUnavailable, "the job store is not reachable from this edge", id)
			return
		}
	}
	h := w.Header()
	for k, vs := range res.Headers {
		h[k] = vs
	}
	h["X-Jetway-Job-State"] = []string{st.State}
	h["Content-Length"] = []string{strconv.Itoa(res.Size)}
	w.WriteHeader(res.Status)
	_, _ = w.Write(body)
}

// Job event streams: at most maxJobStreams at once on an edge, each at
// most maxJobStream long, with a comment every jobStreamPing so proxies
// keep it open.
const (
	maxJobStreams = 4096
	maxJobStream  = time.Hour
	jobStreamPing = 15 * time.Second
)

// jobEvents streams a job's status as Server-Sent Events: the status now,
// then each change (event "status", the status as GET gives it), until
// the job ends, the caller goes or maxJobStream passes. A change is heard
// as its worker writes it: one core subscription on the status's KV
// subject, no consumer.
func (e *Edge) jobEvents(w http.ResponseWriter, r *http.Request, jobs *registry.JobStore, st *registry.JobStatus, id string) {
	if n := e.jobStreams.Add(1); n > maxJobStreams {
		e.jobStreams.Add(-1)
		w.Header().Set("Retry-After", "5")
		writeError(w, bus.CodeOverloaded, "this edge follows its limit of job event streams", id)
		return
	}
	defer e.jobStreams.Add(-1)
	changes := make(chan *nats.Msg, 64)
	sub, err := e.o.Conn.ChanSubscribe(bus.JobStatusSubject(st.ID), changes)
	if err != nil {
		writeError(w, bus.CodeBusUnavailable, "the job store is not reachable from this edge", id)
		return
	}
	defer func() { _ = sub.Unsubscribe() }()
	ctx, cancel := context.WithTimeout(r.Context(), maxJobStream)
	defer cancel()
	// Read again once subscribed: a change between the first read and
	// the subscription is not missed.
	reread := func() *registry.JobStatus {
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		defer rcancel()
		if now, err := jobs.Get(rctx, st.ID); err == nil && now.App == st.App {
			return now
		}
		return nil
	}
	if now := reread(); now != nil {
		st = now
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	var last uint64
	send := func(st *registry.JobStatus) bool {
		if st.Revision <= last {
			return true // seen already
		}
		last = st.Revision
		b, _ := json.Marshal(st)
		_ = rc.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := w.Write(append(append([]byte("event: status\ndata: "), b...), "\n\n"...)); err != nil {
			return false
		}
		return rc.Flush() == nil && !st.Final()
	}
	if !send(st) {
		return
	}
	ping := time.NewTicker(jobStreamPing)
	defer ping.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ping.C:
			_ = rc.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if _, err := w.Write([]byte(": ping\n\n")); err != nil || rc.Flush() != nil {
				return
			}
		case <-changes:
			// A write was published; what the bucket kept is read back
			// (a compare-and-set the stream refused is published too).
			for len(changes) > 0 {
				<-changes
			}
			if next := reread(); next != nil && !send(next) {
				return
			}
		}
	}
}
