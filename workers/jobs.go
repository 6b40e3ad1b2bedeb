package workers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/backend"
	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/registry"
)

// Async jobs (docs/async.md). A worker that serves a pool with an API
// that takes async calls takes the pool's jobs from the pool's durable
// consumer (bus.JobConsumer), as many at a time as it has job slots, and
// runs each like a call that came over NATS: admit, invoke, end — within
// the API's concurrency, so jobs and calls share the bulkhead. Between
// attempts a job waits in the stream (a nak with the backoff as delay);
// its status in the job bucket says where it is. A job is acked (and so
// leaves the stream) only after its final status is written, so a worker
// that dies mid-job leaves it to be delivered again, and the status tells
// the next worker how many attempts were spent.

// Job tuning.
const (
	// jobs one worker runs at once per pool: enough that the round trips
	// of a job's status writes do not bound a pool's rate (bench/async.sh:
	// 64 gave half the jobs per second of 256 on 2 cores).
	jobSlots      = 256
	jobFetchWait  = 5 * time.Second // how long one pull waits for jobs
	jobGather     = 2 * time.Millisecond
	jobRetryDelay = time.Second // a job this worker cannot take now comes back after
	jobWriteTries = 20          // tries of a job's final status write, 500ms apart
)

// DefaultJobBytes bounds the bytes of the jobs one worker holds at once
// per pool (Options.JobBytes): 256 jobs of the largest body would be
// 2 GiB. A job larger than the bound is taken when no other is held.
const DefaultJobBytes = 64 << 20

// maxJobMessage is the largest message of the jobs stream, with room for
// its subject and headers (registry.OpenJobStreams).
const maxJobMessage = int64(registry.MaxMaxBody) + 128<<10

// DefaultJobAckWait is how long a job taken by a worker that went silent
// waits before it is delivered again (Options.JobAckWait); a running job
// says it is in progress three times as often.
const DefaultJobAckWait = 30 * time.Second

// jobPool is the loop that takes one pool's jobs on this worker.
type jobPool struct {
	stop context.CancelFunc
	done chan struct{}
}

// applyJobs takes the jobs of every pool this worker serves an API of —
// not only those with an API taking async calls now: the jobs an API took
// before its async block went (or the API itself) still run or end as
// dead letters — and stops for pools it serves no API of any more. Called
// by Apply with w.mu held.
func (w *Worker) applyJobs(want map[string]*registry.API) {
	pools := map[string]bool{}
	for _, a := range want {
		pools[a.Pool] = true
	}
	for p, jp := range w.jobPools {
		if !pools[p] {
			jp.stop() // its jobs in flight finish; the next come to no one here
			delete(w.jobPools, p)
		}
	}
	for p := range pools {
		if _, ok := w.jobPools[p]; ok {
			continue
		}
		ctx, stop := context.WithCancel(context.Background())
		jp := &jobPool{stop: stop, done: make(chan struct{})}
		w.jobPools[p] = jp
		go func() {
			defer close(jp.done)
			w.takeJobs(ctx, p)
		}()
	}
}

// takeJobs binds to the pool's job consumer (creating it when missing)
// and pulls jobs until ctx ends. A stream or bucket not there yet, or a
// NATS outage, is tried again with a backoff.
func (w *Worker) takeJobs(ctx context.Context, pool string) {
	wait := time.Second
	lim := newJobLimits() // across pulls: the jobs of a pull that failed still run
	for ctx.Err() == nil {
		cons, err := w.js.CreateOrUpdateConsumer(ctx, bus.StreamJobs, jetstream.ConsumerConfig{
			Durable:       bus.JobConsumer(pool),
			Description:   "the async jobs of pool " + pool,
			FilterSubject: bus.JobsPrefix + bus.PoolToken(pool) + ".>",
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       w.o.JobAckWait,
			MaxDeliver:    -1, // a job ends by its attempts and max_age, counted in its status
			// No cap on jobs delivered and not acked: a worker takes only
			// as many as it has slots, and a cap would count the jobs
			// waiting out a backoff, so that one API retrying a backlog
			// would stall its pool's other APIs.
			MaxAckPending: -1,
			MaxWaiting:    512,
		})
		if err == nil {
			err = w.pullJobs(ctx, pool, cons, lim)
		}
		if ctx.Err() != nil || w.o.Conn.IsClosed() {
			return
		}
		w.log.Warn("taking async jobs", "pool", pool, "err", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 30*time.Second)
	}
}

// pullJobs pulls as many jobs as there are free slots and runs each on
// its own goroutine, until ctx ends or a pull fails.
// jobLimits are what one worker's jobs of one pool may hold at once.
type jobLimits struct {
	slots chan struct{} // one per job taken and not ended
	held  atomic.Int64  // bytes of the jobs taken and not ended
	ended chan struct{} // a job ended (its slot and bytes are free)
	// unadmitted counts the jobs taken that their API has not admitted
	// yet (nor turned away): the room they will take is not counted in
	// the APIs' calls in flight yet.
	unadmitted atomic.Int64
}

func newJobLimits() *jobLimits {
	return &jobLimits{slots: make(chan struct{}, jobSlots), ended: make(chan struct{}, 1)}
}

// jobTake is one job a pull took: what it holds of its pool's limits
// until it ends.
type jobTake struct {
	lim      *jobLimits
	size     int64
	admitted atomic.Bool
}

// admit says the job no longer waits to be admitted: its API counts it
// in flight, or it takes no API's room (once; later calls do nothing).
func (t *jobTake) admit() {
	if t.admitted.CompareAndSwap(false, true) {
		t.lim.unadmitted.Add(-1)
	}
}

// end gives back what the job held and tells a waiting pull.
func (t *jobTake) end() {
	t.admit()
	t.lim.held.Add(-t.size)
	<-t.lim.slots
	select {
	case t.lim.ended <- struct{}{}:
	default:
	}
}

// waitEnded waits until a job ends, at most d.
func (l *jobLimits) waitEnded(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-l.ended:
	case <-t.C:
	case <-ctx.Done():
	}
}

// jobRoom is how many more calls the pool's APIs take on this worker now:
// their concurrency less their calls in flight and the jobs taken and not
// admitted yet. A job pulled past it would be put back for a second, to
// come again, and cycle through the worker.
func (w *Worker) jobRoom(pool string, lim *jobLimits) int {
	room := int64(0)
	if subs := w.poolSubs.Load(); subs != nil {
		for _, as := range (*subs)[pool] {
			if st := as.state.Load(); st != nil {
				room += max(0, st.limit-as.inflight.Load())
			}
		}
	}
	return int(max(0, min(room-lim.unadmitted.Load(), jobSlots)))
}

func (w *Worker) pullJobs(ctx context.Context, pool string, cons jetstream.Consumer, lim *jobLimits) error {
	slots, held := lim.slots, &lim.held
	for {
		select { // wait for one free slot, then take what else is free
		case slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		// Take what else is free; with few free, wait a moment for more,
		// so that a deep queue is pulled in batches, not one pull (one
		// round trip) per job that ends.
		n := 1
		gather := time.NewTimer(jobGather)
	take:
		for n < jobSlots {
			if n >= jobSlots/4 {
				select {
				case slots <- struct{}{}:
					n++
					continue
				default:
					break take
				}
			}
			select {
			case slots <- struct{}{}:
				n++
			case <-gather.C:
				break take
			}
		}
		gather.Stop()
		if room := w.jobRoom(pool, lim); room < n {
			// Its APIs are at their concurrency (calls and jobs): no more
			// jobs than they take now. With no room, one job once there
			// is some (looked at each 100 ms and at a job's end), or
			// after a second anyway: callbacks, and the jobs of an API
			// this worker does not serve, take none, and must not wait
			// for the APIs' calls to end.
			keep := max(room, 1)
			for range n - keep {
				<-slots
			}
			n = keep
			for end := time.Now().Add(jobRetryDelay); room == 0 && ctx.Err() == nil && time.Now().Before(end); room = w.jobRoom(pool, lim) {
				lim.waitEnded(ctx, jobRetryDelay/10)
			}
			if ctx.Err() != nil { // the pool stopped while it waited
				<-slots
				return nil
			}
		}
		take, opts := n, []jetstream.FetchOpt{jetstream.FetchMaxWait(jobFetchWait)}
		if room := w.o.JobBytes - held.Load(); held.Load() > 0 || room >= maxJobMessage {
			opts = append(opts, jetstream.FetchMaxBytes(int(max(room, 1))))
		} else {
			take = 1 // with none held, one job of any size
		}
		asked := time.Now()
		batch, err := cons.Fetch(take, opts...)
		if err != nil {
			for range n {
				<-slots
			}
			return err
		}
		got := 0
		for m := range batch.Messages() {
			got++
			if ctx.Err() != nil {
				_ = m.Nak() // stopping: another worker of the pool takes it now
				<-slots
				continue
			}
			t := &jobTake{lim: lim, size: jobMsgSize(m)}
			held.Add(t.size)
			lim.unadmitted.Add(1)
			go func() {
				defer t.end()
				w.runJob(pool, m, t)
			}()
		}
		for range n - got {
			<-slots
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		if got == 0 && held.Load() > 0 && time.Since(asked) < jobFetchWait/2 {
			// An empty answer before the wait ran out: the next job is
			// larger than the bytes left (the server says so, and the
			// client reads it as the pull's end). After a job ends, or
			// a second (another worker may have taken it).
			lim.waitEnded(ctx, time.Second)
		}
	}
}

// jobMsgSize is about what the server counts of a job's message against
// a pull's max bytes: its subject, headers and body.
func jobMsgSize(m jetstream.Msg) int64 {
	n := len(m.Subject()) + len(m.Data())
	for k, vs := range m.Headers() {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return int64(n)
}

// job is one delivery of a job: its message, status and API.
type job struct {
	w     *Worker
	count *jobCounters // nil until the job is tied to an API tier
	m     jetstream.Msg
	jobs  *registry.JobStore
	st    *registry.JobStatus
	cfg   *registry.Async
	ctx   context.Context // bounds the job store's calls
}

// runJob runs one delivery of a job: an attempt, or its end without one
// (cancelled, expired, its attempts spent, its API gone). It calls
// t.admit once its API has admitted the attempt (the call is then
// counted in flight) or once it is sure no API's room is taken.
func (w *Worker) runJob(pool string, m jetstream.Msg, t *jobTake) {
	ctx, cancel := context.WithTimeout(context.Background(), MaxJobRun)
	defer cancel()
	id := m.Headers().Get(bus.HdrJobID)
	tok, tier, name, ok := bus.ParseJobSubject(m.Subject())
	if idTok, idOK := registry.JobPool(id); !ok || !idOK || tok != bus.PoolToken(pool) || idTok != tok {
		// Nothing can run it: only a node with an edge's credentials
		// could have written it.
		w.log.Warn("async job malformed; dropped", "subject", m.Subject(), "job", id)
		_ = m.Term()
		return
	}
	if tier == bus.TierCallback {
		t.admit() // a callback takes no API's room
		w.runCallback(m, name)
		return
	}
	jobs := w.jobs
	submitted := time.Now()
	md, mdErr := m.Metadata()
	if mdErr == nil {
		submitted = md.Timestamp
	}
	// The API tier as this worker serves it; a job with none here ends
	// (read first: its status tells it was cancelled, say) once the
	// registry says its API is gone or moved to another pool.
	key := jobKey(name, tier)
	w.mu.Lock()
	as := w.subs[key]
	w.mu.Unlock()
	var api *registry.API
	cfg := defaultAsync()
	if as != nil {
		if api = as.state.Load().api; api.Async != nil {
			cfg = api.Async // else: the API stopped taking new jobs; those it took still run
		}
	} else if !w.apiGone(name, tier, pool) {
		_ = m.NakWithDelay(jobRetryDelay) // not applied here yet
		return
	}
	// Admitted before anything is read: a job put back because its API
	// is at its concurrency costs the store nothing.
	expired := time.Since(submitted) > time.Duration(cfg.MaxAge)
	var inv invocation
	if as != nil && !expired {
		var err error
		if inv, err = w.admitUntil(as, time.Now().Add(time.Duration(cfg.AttemptTimeout))); err != nil {
			_ = m.NakWithDelay(jobRetryDelay) // the API is at its concurrency: later
			return
		}
		t.admit()
		defer inv.end()
	} else {
		t.admit() // to end without an attempt (expired, or no API here): it takes no room
	}
	// The status as the message says it is, which the edge wrote before it
	// published the job: the app and request id are the message's own.
	h := m.Headers()
	pending := func(submitted time.Time) *registry.JobStatus {
		return &registry.JobStatus{ID: id, API: name, Tier: tier, Pool: pool, State: registry.JobPending, Submitted: submitted.UTC(),
			App: h.Get(bus.HdrApp), User: h.Get(bus.HdrJobUser), RequestID: h.Get(bus.HdrRequestID)}
	}
	var st *registry.JobStatus
	var err error
	if rev, at, ok := bus.ParseJobStatus(h.Get(bus.HdrJobStatus)); ok && mdErr == nil && md.NumDelivered == 1 && as != nil && !expired {
		// Its first delivery, to be attempted: the status is still as its
		// edge wrote it, unless it was cancelled meanwhile — then
		// "running" is refused at this revision and the next delivery
		// reads it. (A job to end without an attempt reads its status:
		// a cancel stands.)
		st = pending(at)
		st.Revision = rev
	} else {
		st, err = jobs.Get(ctx, id)
	}
	switch {
	case errors.Is(err, registry.ErrNotFound):
		// Its edge has not written it yet, or could not: this worker does.
		st = pending(submitted)
	case err != nil:
		w.log.Warn("reading an async job's status", "job", id, "err", err)
		_ = m.NakWithDelay(jobRetryDelay)
		return
	}
	j := &job{w: w, m: m, jobs: jobs, st: st, ctx: ctx, cfg: cfg}
	switch {
	case st.State == registry.JobCancelled:
		w.jobCount(key).cancelled.Add(1)
		j.deadLetter(registry.ReasonCancelled)
		_ = m.Ack()
		return
	case st.Final():
		_ = m.Ack() // delivered again after it ended (its ack was lost)
		return
	case as == nil:
		j.finish(registry.JobDead, registry.ReasonAPIRemoved)
		return
	}
	st.MaxAttempts = cfg.Attempts
	if expired {
		j.finish(registry.JobDead, registry.ReasonExpired)
		return
	}
	if st.Attempts >= cfg.Attempts {
		// Its attempts went with workers that died during them.
		j.finish(registry.JobDead, registry.ReasonExhausted)
		return
	}
	st.State, st.NextAttempt = registry.JobRunning, nil
	st.Attempts++
	j.count = w.jobCount(key)
	if err := j.write(); err != nil {
		st.Attempts--
		j.count = nil
		switch {
		case errors.Is(err, registry.ErrJobConflict):
			_ = m.Nak() // cancelled meanwhile: the next delivery reads it
		case errors.Is(err, registry.ErrJobExists) && h.Get(bus.HdrJobStatus) == "":
			_ = m.Nak() // a keyed job's status, written by its edge meanwhile: read it now
		case errors.Is(err, registry.ErrJobExists):
			// An unkeyed job's status was written before the job: found
			// missing, it was removed by its edge (a delete marker, for
			// a job it told its caller was not stored). Read again in a
			// second, not at once.
			_ = m.NakWithDelay(jobRetryDelay)
		default:
			w.log.Warn("writing an async job's status", "job", id, "err", err)
			_ = m.NakWithDelay(jobRetryDelay)
		}
		return
	}
	j.count.attempts.Add(1)
	stop := j.keepInProgress(w.o.JobAckWait / 3)
	resp, err := j.attempt(inv, api, tier)
	stop()
	j.judge(resp, err)
	if resp != nil {
		resp.Free()
	}
}

// minFinalKeep is the least a job's final status is kept (see write).
const minFinalKeep = 5 * time.Minute

// answerFailed reports whether a backend's answer fails its job: the
// API's classify verdict when it has one, else any status from 400 up (a
// job has no caller to read a 4xx; its status says it failed).
func answerFailed(resp *backend.Response) bool {
	if resp.Classified {
		return resp.Failed
	}
	return resp.Status >= 400
}

// jobKey is the key (API.Key) of a job's API tier.
func jobKey(name, tier string) string {
	if tier == bus.TierSandbox || tier == bus.TierDraft {
		return name + "@" + tier
	}
	return name
}

// MaxJobRun bounds everything one delivery of a job does: the longest
// attempt and its status writes.
const MaxJobRun = registry.MaxAsyncAttemptTimeout + time.Minute

// attempt calls the API's stack with the job's request.
func (j *job) attempt(inv invocation, api *registry.API, tier string) (*backend.Response, error) {
	m := j.m
	// A copy: decoding takes the wire's headers out, and the message
	// keeps them for its dead letter.
	h := nats.Header(maps.Clone(m.Headers()))
	if _, err := bus.WireOf(h); err != nil {
		return nil, bus.Errorf(bus.CodeWireVersion, err.Error())
	}
	req := decodeRequest(api, &nats.Msg{Subject: m.Subject(), Header: h, Data: m.Data()})
	req.Stream = 0
	start := time.Now()
	resp, err := inv.invoke(context.Background(), req)
	failed := err != nil || answerFailed(resp)
	detail := ""
	if failed {
		if err != nil {
			code, msg := errorCode(err)
			detail = string(code) + ": " + msg
		} else {
			detail = "backend answered " + strconv.Itoa(resp.Status)
		}
	}
	inv.as.stats.record(time.Since(start), failed, detail)
	return resp, err
}

// judge ends an attempt: the job succeeded, waits for its next attempt,
// or ends failed.
func (j *job) judge(resp *backend.Response, err error) {
	st, cfg := j.st, j.cfg
	var status int
	timedOut := false
	if err != nil {
		code, msg := errorCode(err)
		status, timedOut = code.Status(), code == bus.CodeGatewayTimeout
		st.LastError = &registry.JobError{Code: string(code), Status: status, Message: msg}
	} else {
		status = resp.Status
		rh := resultHeaders(resp.Header)
		if resp.Channel != "" {
			rh.Set(channelHeader, resp.Channel)
		}
		st.Result = registry.NewJobResult(resp.Status, rh, bytes.Clone(resp.Body), int(cfg.MaxResult))
		if st.Result.Omitted { // larger than the status keeps: an object of its own
			if name, err := j.jobs.StoreResult(j.ctx, st.ID, st.Attempts, resp.Body); err == nil {
				st.Result.Omitted, st.Result.Stored = false, name
			} else {
				j.w.log.Warn("async job's result not stored", "job", st.ID, "size", len(resp.Body), "err", err)
			}
		}
		if !answerFailed(resp) {
			st.LastError = nil
			j.finish(registry.JobSucceeded, "")
			return
		}
		st.LastError = &registry.JobError{Status: status, Message: "the backend answered " + strconv.Itoa(status)}
	}
	if !cfg.Retries(status, timedOut) {
		j.finish(registry.JobFailed, registry.ReasonFailed)
		return
	}
	if st.Attempts >= cfg.Attempts {
		j.finish(registry.JobFailed, registry.ReasonExhausted)
		return
	}
	delay := jobBackoff(cfg, st.Attempts, resp)
	// Its wait is counted as at delivery, from its message (a replay's is
	// newer than the job's submission).
	since := st.Submitted
	if md, err := j.m.Metadata(); err == nil {
		since = md.Timestamp
	}
	if time.Since(since)+delay > time.Duration(cfg.MaxAge) {
		j.finish(registry.JobDead, registry.ReasonExpired)
		return
	}
	j.count.retries.Add(1)
	next := time.Now().Add(delay).UTC()
	st.State, st.NextAttempt = registry.JobPending, &next
	if err := j.write(); err != nil && !errors.Is(err, registry.ErrJobConflict) {
		j.w.log.Warn("writing an async job's status", "job", st.ID, "err", err)
	}
	_ = j.m.NakWithDelay(delay)
}

// finish ends the job: its final status, then, for a job that did not
// succeed, its dead letter, then the ack that takes it out of the stream.
// A status that cannot be written is tried again (the job held in
// progress) rather than acked unwritten, or left to run again.
func (j *job) finish(state, reason string) {
	st := j.st
	st.State, st.Reason, st.NextAttempt = state, reason, nil
	if j.count == nil {
		j.count = j.w.jobCount(jobKey(st.API, st.Tier))
	}
	switch state {
	case registry.JobSucceeded:
		j.count.succeeded.Add(1)
	case registry.JobFailed:
		j.count.failed.Add(1)
	case registry.JobDead:
		j.count.dead.Add(1)
	}
	targets := callbackTargets(j.m, j.cfg.Callbacks, state)
	st.Callbacks = st.Callbacks[:0]
	for _, d := range targets {
		st.Callbacks = append(st.Callbacks, registry.CallbackStatus{To: destinationName(d), State: registry.CallbackPending})
	}
	for try := 0; ; try++ {
		err := j.write()
		if err == nil {
			break
		}
		if errors.Is(err, registry.ErrJobConflict) {
			// Cancelled meanwhile (only a pending job is): this end
			// stands, at the status's new revision.
			cur, gerr := j.jobs.Get(j.ctx, st.ID)
			if gerr == nil {
				st.Revision = cur.Revision
				continue
			}
			err = gerr
		}
		if try == jobWriteTries {
			j.w.log.Error("async job's final status not written; acked anyway", "job", st.ID, "state", state, "err", err)
			break
		}
		_ = j.m.InProgress()
		time.Sleep(500 * time.Millisecond)
	}
	if state != registry.JobSucceeded {
		j.deadLetter(reason)
	}
	j.sendCallbacks(targets)
	if err := j.m.Ack(); err != nil { // a lost ack redelivers a job whose final status is written: acked then
		j.w.log.Warn("acking an async job", "job", st.ID, "err", err)
	}
}

// write stores the job's status: created when it has none yet, else at
// the revision it was read at. A pending or running job's status is kept
// as long as any job may still wait (registry.JobKeepAge: its API's
// max_age may be raised meanwhile), a final one for the result TTL —
// but no less than minFinalKeep and two ack waits: a job whose ack was
// lost is delivered again an ack wait later, and must find its end there
// rather than no status (which would run it again).
func (j *job) write() error {
	ttl := registry.JobKeepAge
	if j.st.Final() {
		ttl = max(time.Duration(j.cfg.ResultTTL), minFinalKeep, 2*j.w.o.JobAckWait)
	}
	if j.st.Revision == 0 {
		return j.jobs.Create(j.ctx, j.st, ttl)
	}
	return j.jobs.Update(j.ctx, j.st, ttl)
}

// deadLetter records a job that ended without success in the dead
// letters: its request as it was submitted (so it can be replayed), and
// why it ended. A second record of the same end (a delivery again after
// a lost ack) is dropped by the stream's deduplication.
func (j *job) deadLetter(reason string) {
	st, m := j.st, j.m
	h := nats.Header{}
	for k, vs := range m.Headers() {
		h[k] = vs
	}
	h.Set(jetstream.MsgIDHeader, "dlq."+st.ID+"."+j.seq())
	h.Set(registry.HdrDeadReason, reason)
	h.Set(registry.HdrDeadState, st.State)
	h.Set(registry.HdrDeadAttempts, strconv.Itoa(st.Attempts))
	if st.App != "" {
		h.Set(registry.HdrDeadApp, st.App)
	}
	if e := st.LastError; e != nil {
		h.Set(registry.HdrDeadError, strings.Join(slices.DeleteFunc([]string{strconv.Itoa(e.Status), e.Code, truncate(e.Message, 1024)}, func(s string) bool { return s == "" }), " "))
	}
	_, tier, name, _ := bus.ParseJobSubject(m.Subject())
	out := &nats.Msg{Subject: bus.DeadLetterSubject(st.Pool, tier, name), Header: h, Data: m.Data()}
	if _, err := j.w.js.PublishMsg(j.ctx, out); err != nil {
		j.w.log.Error("async job's dead letter not written", "job", st.ID, "reason", reason, "err", err)
	}
}

// seq is the job message's stream sequence: what keeps the ids of the
// messages its end makes (dead letter, callbacks) apart from a replay's,
// whose message is another (deduplication would drop them otherwise).
func (j *job) seq() string {
	if md, err := j.m.Metadata(); err == nil {
		return strconv.FormatUint(md.Sequence.Stream, 10)
	}
	return "0"
}

// keepInProgress tells the stream the job is still being worked on until
// the returned stop is called, so a long attempt is not delivered again
// under it.
func (j *job) keepInProgress(every time.Duration) (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = j.m.InProgress()
			}
		}
	}()
	return func() { close(done) }
}

// jobBackoff is the wait before attempt n+1: exponential from the API's
// backoff with equal jitter, at least what the backend's Retry-After
// asked, at most max_backoff.
func jobBackoff(cfg *registry.Async, n int, resp *backend.Response) time.Duration {
	d := time.Duration(cfg.Backoff)
	for i := 1; i < n && d < time.Duration(cfg.MaxBackoff); i++ {
		d *= 2
	}
	d = min(d, time.Duration(cfg.MaxBackoff))
	d = d/2 + rand.N(d/2+1)
	if resp != nil {
		if ra := retryAfter(resp.Header.Get("Retry-After"), time.Now()); ra > d {
			d = ra
		}
	}
	return min(d, time.Duration(cfg.MaxBackoff))
}

// retryAfter reads a Retry-After value: seconds, or an HTTP date.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// resultHeaders are the backend's headers a job's result keeps: its own,
// less what only made sense on its connection.
func resultHeaders(h http.Header) http.Header {
	out := make(http.Header, len(h))
	for k, vs := range h {
		switch k {
		case "Connection", "Keep-Alive", "Transfer-Encoding", "Content-Length", "Trailer", "Upgrade":
			continue
		}
		out[k] = vs
	}
	bus.CleanHeaders(nats.Header(out))
	return out
}

// defaultAsync is the async block a job of an API that has none (any
// more) runs with.
func defaultAsync() *registry.Async {
	return registry.DefaultAsyncConfig()
}

// apiGone reports whether the registry as last applied has no such API
// tier any more in pool (deleted, or moved to another pool, whose
// workers do not read this pool's jobs).
func (w *Worker) apiGone(name, tier, pool string) bool {
	s := w.snap.Load()
	if s == nil {
		return false
	}
	var a *registry.API
	switch tier {
	case bus.TierDraft:
		a = s.Drafts[name]
	case bus.TierSandbox:
		if p := s.APIs[name]; p != nil {
			a = p.SandboxAPI()
		}
	default:
		a = s.APIs[name]
	}
	return a == nil || a.Pool != pool
}

// jobCounters count one API tier's jobs on this worker.
type jobCounters struct {
	attempts, retries, succeeded, failed, dead, cancelled atomic.Int64
	callbacksDelivered, callbacksRetried, callbacksFailed atomic.Int64
}

// jobCount is the counters of an API tier (its key).
func (w *Worker) jobCount(key string) *jobCounters {
	if c, ok := w.jobCounts.Load(key); ok {
		return c.(*jobCounters)
	}
	c, _ := w.jobCounts.LoadOrStore(key, new(jobCounters))
	return c.(*jobCounters)
}

// WriteJobMetrics writes this worker's async job counters in the
// Prometheus text format.
func (w *Worker) WriteJobMetrics(out io.Writer, node string) error {
	type row struct {
		key string
		c   *jobCounters
	}
	var rows []row
	w.jobCounts.Range(func(k, v any) bool {
		rows = append(rows, row{k.(string), v.(*jobCounters)})
		return true
	})
	if len(rows) == 0 {
		return nil
	}
	slices.SortFunc(rows, func(a, b row) int { return strings.Compare(a.key, b.key) })
	var b strings.Builder
	b.WriteString("# HELP jetway_jobs_total Async job events on this worker: attempts made, retries scheduled, and jobs ended by how.\n# TYPE jetway_jobs_total counter\n")
	for _, r := range rows {
		for _, e := range []struct {
			name string
			n    *atomic.Int64
		}{{"attempt", &r.c.attempts}, {"retry", &r.c.retries}, {"succeeded", &r.c.succeeded}, {"failed", &r.c.failed}, {"dead", &r.c.dead}, {"cancelled", &r.c.cancelled}} {
			fmt.Fprintf(&b, "jetway_jobs_total{api=%q,event=%q,node=%q} %d\n", r.key, e.name, node, e.n.Load())
		}
	}
	b.WriteString("# HELP jetway_job_callbacks_total Async job callbacks sent by this worker, by how each attempt went.\n# TYPE jetway_job_callbacks_total counter\n")
	for _, r := range rows {
		for _, e := range []struct {
			name string
			n    *atomic.Int64
		}{{"delivered", &r.c.callbacksDelivered}, {"retried", &r.c.callbacksRetried}, {"failed", &r.c.callbacksFailed}} {
			fmt.Fprintf(&b, "jetway_job_callbacks_total{api=%q,outcome=%q,node=%q} %d\n", r.key, e.name, node, e.n.Load())
		}
	}
	_, err := io.WriteString(out, b.String())
	return err
}
