package workers_test

// A job without an Idempotency-Key: its edge writes the pending status
// first and publishes the job with the status's revision
// (bus.HdrJobStatus); the worker that takes it first writes "running" at
// that revision without reading the status (docs/async.md, "How a job
// runs").

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/internal/jetwaytest"
	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/workers"
)

// startWithoutJobWorker is a gateway whose only worker serves another
// pool, so that jobs of pool "jobs" wait in the stream until the test
// adds a worker of it.
func startWithoutJobWorker(t *testing.T) (*jetwaytest.Gateway, jetstream.JetStream) {
	g := jetwaytest.StartWith(t, jetwaytest.Options{Worker: workers.Options{Pools: []string{"other"}}})
	js, err := jetstream.New(g.Conn)
	if err != nil {
		t.Fatal(err)
	}
	return g, js
}

func TestAsyncJobCarriesItsPendingStatus(t *testing.T) {
	g, js := startWithoutJobWorker(t)
	b := newJobBackend(t, 200)
	g.Publish(asyncAPI("first", b, `{}`, ""))
	loc, id := submit(t, g, "/first", "x")

	jobs, err := registry.NewJobStore(g.Conn)
	if err != nil {
		t.Fatal(err)
	}
	pending, err := jobs.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(context.Background(), bus.StreamJobs)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(context.Background(), bus.JobSubject("jobs", bus.TierAPI, "first"))
	if err != nil {
		t.Fatal(err)
	}
	rev, at, ok := bus.ParseJobStatus(m.Header.Get(bus.HdrJobStatus))
	if !ok || rev != pending.Revision || !at.Equal(pending.Submitted) {
		t.Fatalf("job message says status %q; the status is at revision %d, submitted %v", m.Header.Get(bus.HdrJobStatus), pending.Revision, pending.Submitted)
	}

	g.AddWorker("jobs")
	done := waitJob(t, g, loc, registry.JobSucceeded)
	if done.Attempts != 1 || !done.Submitted.Equal(pending.Submitted) || done.App != pending.App || done.RequestID != pending.RequestID {
		t.Fatalf("ended as %+v; pending was %+v", done, pending)
	}
}

// A job cancelled before any worker took it is never run: the worker's
// "running" at the revision the message carries is refused, and the next
// delivery reads the cancel.
func TestAsyncJobCancelledBeforeItsFirstDeliveryNeverRuns(t *testing.T) {
	g, _ := startWithoutJobWorker(t)
	b := newJobBackend(t, 200)
	g.Publish(asyncAPI("early", b, `{}`, ""))
	loc, id := submit(t, g, "/early", "x")
	if r := g.Do("DELETE", loc, nil); r.Status != http.StatusOK {
		t.Fatalf("cancel: %d %s", r.Status, r.Body)
	}
	g.AddWorker("jobs")
	m := deadLetter(t, g, "early")
	if m.Header.Get(registry.HdrDeadReason) != registry.ReasonCancelled || m.Header.Get(bus.HdrJobID) != id {
		t.Fatalf("dead letter: %v", m.Header)
	}
	time.Sleep(100 * time.Millisecond)
	if n := b.count(); n != 0 {
		t.Fatalf("a job cancelled before it was taken ran: %d calls", n)
	}
	if st := waitJob(t, g, loc, registry.JobCancelled); st.Attempts != 0 {
		t.Fatalf("cancelled job: %+v", st)
	}
}

// A cancel is kept as long as its job may wait in the stream: a status
// that expired first would let a worker that takes the job later run it.
func TestAsyncCancelOutlivesTheJobsWait(t *testing.T) {
	g, js := startWithoutJobWorker(t)
	b := newJobBackend(t, 200)
	g.Publish(asyncAPI("late", b, `{"max_age":"168h"}`, ""))
	loc, id := submit(t, g, "/late", "x")
	if r := g.Do("DELETE", loc, nil); r.Status != http.StatusOK {
		t.Fatalf("cancel: %d %s", r.Status, r.Body)
	}
	if kept := statusKept(t, js, id); kept < registry.MaxAsyncAge {
		t.Fatalf("the cancel is kept %v; the job may wait %v", kept, registry.MaxAsyncAge)
	}
}

// A job the stream refuses leaves no status behind: its edge wrote one
// first, and removes it (no one was told the id; it would wait as
// pending until its TTL, filling the bucket under a burst of refusals).
func TestAsyncRefusedJobLeavesNoStatus(t *testing.T) {
	g, js := startWithoutJobWorker(t)
	b := newJobBackend(t, 200)
	g.Publish(asyncAPI("full", b, `{}`, ""))
	ctx := context.Background()
	s, err := js.Stream(ctx, bus.StreamJobs)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.MaxMsgsPerSubject = 1 // the API's queue holds one job
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	_, id := submit(t, g, "/full", "x")
	r := g.Do("POST", "/full", nil, "Prefer", "respond-async")
	if r.Status != http.StatusServiceUnavailable || r.Code != string(bus.CodeOverloaded) {
		t.Fatalf("second job in a full queue: %d %s", r.Status, r.Body)
	}

	kv, err := js.Stream(ctx, "KV_"+bus.BucketJobs)
	if err != nil {
		t.Fatal(err)
	}
	info, err := kv.Info(ctx, jetstream.WithSubjectFilter("$KV."+bus.BucketJobs+".>"))
	if err != nil {
		t.Fatal(err)
	}
	var live []string
	for subj := range info.State.Subjects {
		m, err := kv.GetLastMsgForSubject(ctx, subj)
		if err != nil {
			t.Fatal(err)
		}
		if op := m.Header.Get("KV-Operation"); op != "DEL" && op != "PURGE" {
			live = append(live, subj)
		}
	}
	if len(live) != 1 || live[0] != bus.JobStatusSubject(id) {
		t.Fatalf("statuses kept: %v; want only the accepted job's (%s)", live, id)
	}
}

// A worker holds its pool's jobs within its bytes (Options.JobBytes), not
// only within its slots: six jobs of 300 KiB under 1 MiB run three at a
// time, and all end.
func TestAsyncWorkerHoldsJobsWithinItsBytes(t *testing.T) {
	g, _ := startWithoutJobWorker(t)
	b := newJobBackend(t, 200)
	b.hold = make(chan struct{})
	g.Publish(asyncAPI("big", b, `{"attempt_timeout":"30s"}`, ""))
	body := strings.Repeat("x", 300<<10)
	var locs []string
	for range 6 {
		loc, _ := submit(t, g, "/big", body)
		locs = append(locs, loc)
	}
	g.AddWorkerWith(workers.Options{Pools: []string{"jobs"}, JobBytes: 1 << 20})
	natstest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if n := b.count(); n != 3 {
			return fmt.Errorf("%d jobs at the backend, want 3", n)
		}
		return nil
	})
	time.Sleep(300 * time.Millisecond)
	if n := b.count(); n != 3 {
		t.Fatalf("%d jobs of 300 KiB held under 1 MiB", n)
	}
	close(b.hold)
	for _, loc := range locs {
		waitJob(t, g, loc, registry.JobSucceeded)
	}
}

// A job cancelled while it waited, and then past its max_age, stays
// cancelled: the worker reads its status before it ends it without an
// attempt (no "expired" over the cancel, no failure callback).
func TestAsyncJobCancelledThenExpiredStaysCancelled(t *testing.T) {
	g, _ := startWithoutJobWorker(t)
	b := newJobBackend(t, 200)
	g.Publish(asyncAPI("late", b, `{"max_age":"1s"}`, ""))
	loc, _ := submit(t, g, "/late", "x")
	if r := g.Do("DELETE", loc, nil); r.Status != http.StatusOK {
		t.Fatalf("cancel: %d %s", r.Status, r.Body)
	}
	time.Sleep(1200 * time.Millisecond)
	g.AddWorker("jobs")
	m := deadLetter(t, g, "late")
	if m.Header.Get(registry.HdrDeadReason) != registry.ReasonCancelled {
		t.Fatalf("dead letter: %v", m.Header)
	}
	if st := waitJob(t, g, loc, registry.JobCancelled); st.Reason != registry.ReasonCancelled {
		t.Fatalf("status: %+v", st)
	}
}

// A worker pulls no more of a pool's jobs than its APIs' concurrency
// takes — counting the jobs pulled and not admitted yet: the rest wait in
// the stream, not delivered and put back each second, and as calls end
// one by one each next job is delivered about once.
func TestAsyncJobsPulledWithinTheConcurrency(t *testing.T) {
	g, js := startWithoutJobWorker(t)
	b := newJobBackend(t, 200)
	b.hold = make(chan struct{})
	release := sync.OnceFunc(func() { close(b.hold) })
	t.Cleanup(release) // a failure below must not leave the backend's calls held
	g.Publish(asyncAPI("narrow", b, `{"attempt_timeout":"30s"}`, `,"concurrency":2`))
	const jobs = 20
	var locs []string
	for range jobs {
		loc, _ := submit(t, g, "/narrow", "x")
		locs = append(locs, loc)
	}
	g.AddWorker("jobs")
	natstest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if n := b.count(); n != 2 {
			return fmt.Errorf("%d jobs at the backend, want 2", n)
		}
		return nil
	})
	time.Sleep(1500 * time.Millisecond)
	c, err := js.Consumer(context.Background(), bus.StreamJobs, bus.JobConsumer("jobs"))
	if err != nil {
		t.Fatal(err)
	}
	delivered := func() uint64 {
		t.Helper()
		info, err := c.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return info.Delivered.Consumer
	}
	// Two running, and at most one a second pulled anyway (for the
	// callbacks, which take no room) and put back.
	if d := delivered(); d > 4 {
		t.Fatalf("%d deliveries of %d jobs with 2 running", d, jobs)
	}
	for range jobs { // the calls end one by one
		select {
		case b.hold <- struct{}{}:
		case <-time.After(10 * time.Second):
			t.Fatal("no call waiting at the backend")
		}
		time.Sleep(20 * time.Millisecond)
	}
	release()
	for _, loc := range locs {
		waitJob(t, g, loc, registry.JobSucceeded)
	}
	if d := delivered(); d > jobs+4 {
		t.Fatalf("%d deliveries of %d jobs at concurrency 2", d, jobs)
	}
}

// A full status bucket refuses a job before it is stored, with a 503
// that says so (not "the job store is not reachable"), and nothing of it
// is left in the jobs stream.
func TestAsyncFullStatusStoreRefusesTheJob(t *testing.T) {
	g, js := startWithoutJobWorker(t)
	b := newJobBackend(t, 200)
	g.Publish(asyncAPI("statusfull", b, `{}`, ""))
	ctx := context.Background()
	kv, err := js.Stream(ctx, "KV_"+bus.BucketJobs)
	if err != nil {
		t.Fatal(err)
	}
	cfg := kv.CachedInfo().Config
	cfg.MaxBytes, cfg.MaxMsgSize = 4096, 2048 // a handful of statuses
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	accepted := 0
	for range 50 {
		r := g.Do("POST", "/statusfull", nil, "Prefer", "respond-async")
		if r.Status == http.StatusAccepted {
			accepted++
			continue
		}
		if r.Status != http.StatusServiceUnavailable || r.Code != string(bus.CodeOverloaded) ||
			!strings.Contains(string(r.Body), "status store is full") || r.Header.Get("Retry-After") == "" {
			t.Fatalf("job past a full status bucket: %d %v %s", r.Status, r.Header, r.Body)
		}
		break
	}
	if accepted == 0 || accepted == 50 {
		t.Fatalf("%d jobs accepted before the bucket was full", accepted)
	}
	s, err := js.Stream(ctx, bus.StreamJobs)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != uint64(accepted) {
		t.Fatalf("%d jobs stored, %d accepted", info.State.Msgs, accepted)
	}
}

// A callback is delivered while its pool's APIs are at their concurrency:
// it takes no API's room, so a worker whose APIs have none still pulls
// (one message a second at least) instead of waiting for a call to end.
func TestAsyncCallbackNotHeldByAFullAPI(t *testing.T) {
	g := jetwaytest.Start(t)
	b := newJobBackend(t, 200)
	cr := newCallbackReceiver(t)
	// The first two attempts fail: the callback is retried a second
	// later, twice (the first retry may fill a pull asked for before the
	// API was full; the second needs a pull asked for while it is).
	cr.fails.Store(2)
	g.Publish(asyncAPI("full", b, fmt.Sprintf(`{"callbacks":{"allow":[%q],"allow_private":true,"backoff":"1s","max_backoff":"1s"}}`, cr.URL+"/hooks/"),
		`,"concurrency":1,"timeout":"30s","auth":{"methods":["key"]}`))
	key, rec, _ := registry.NewAPIKey()
	secret, _ := registry.NewHMACSecret()
	g.PutApps(&registry.App{ID: "acme", Status: registry.AppActive, Keys: []registry.AppKey{rec}, HMACSecrets: []registry.HMACSecret{secret}, APIs: []string{"*"}})

	loc, _ := submit(t, g, "/full", "x", "X-Api-Key", key, "X-Callback-Url", cr.URL+"/hooks/done")
	waitJob(t, g, loc, registry.JobSucceeded, "X-Api-Key", key)
	natstest.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		if cr.count() < 1 {
			return errors.New("no callback attempt yet")
		}
		return nil
	})
	// The API's one call in flight, held at the backend, while the
	// callback waits out its backoff.
	hold := make(chan struct{})
	b.mu.Lock()
	b.hold = hold
	b.mu.Unlock()
	released := false
	release := func() {
		if !released {
			released = true
			close(hold)
		}
	}
	t.Cleanup(release)
	call := make(chan int, 1)
	go func() { call <- g.Do("POST", "/full", strings.NewReader("y"), "X-Api-Key", key).Status }()
	natstest.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		if b.count() < 2 {
			return errors.New("the call is not at the backend yet")
		}
		return nil
	})
	natstest.CheckFor(t, 8*time.Second, 20*time.Millisecond, func() error {
		if cr.count() < 3 {
			return errors.New("the callback was not retried while the API was full")
		}
		return nil
	})
	release()
	if s := <-call; s != http.StatusOK {
		t.Fatalf("the held call: %d", s)
	}
}

// A replayed dead letter whose status has expired gets a new one that is
// still its user's: only the token subject that submitted the job reads
// it (not another user of the app, nor its key).
func TestAsyncReplayKeepsTheJobsUser(t *testing.T) {
	g, js := startWithoutJobWorker(t)
	b := newJobBackend(t, 200)
	g.Publish(asyncAPI("mine", b, `{}`, ""))
	id := registry.NewJobID("jobs")
	seq := putDeadLetter(t, js, "mine", id, bus.HdrJobUser, "alice", registry.HdrDeadApp, "acme")
	d, err := g.Client.ReplayDeadLetter(context.Background(), seq)
	if err != nil || d.User != "alice" {
		t.Fatalf("replay: %+v %v", d, err)
	}
	jobs, err := registry.NewJobStore(g.Conn)
	if err != nil {
		t.Fatal(err)
	}
	st, err := jobs.Get(context.Background(), id)
	if err != nil || st.User != "alice" || st.App != "acme" || st.State != registry.JobPending {
		t.Fatalf("the replayed job's new status: %+v %v", st, err)
	}
}

// A job replayed long after its submission and cancelled at once: the
// replay's pending status and the cancel both outlive the new message's
// wait (up to max_age from the replay, not from the submission).
func TestAsyncCancelOfAReplayedJobOutlivesItsWait(t *testing.T) {
	g, js := startWithoutJobWorker(t)
	b := newJobBackend(t, 200)
	g.Publish(asyncAPI("again", b, `{"max_age":"168h","result_ttl":"168h"}`, ""))
	ctx := context.Background()
	id := registry.NewJobID("jobs")
	jobs, err := registry.NewJobStore(g.Conn)
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-7*24*time.Hour - 12*time.Hour).UTC()
	if err := jobs.Create(ctx, &registry.JobStatus{ID: id, API: "again", Tier: bus.TierAPI, Pool: "jobs", State: registry.JobFailed, Submitted: old}, 168*time.Hour); err != nil {
		t.Fatal(err)
	}
	seq := putDeadLetter(t, js, "again", id)
	kept := func(what string) {
		t.Helper()
		if kept := statusKept(t, js, id); kept < registry.MaxAsyncAge {
			t.Fatalf("%s is kept %v; the replayed job may wait %v", what, kept, registry.MaxAsyncAge)
		}
	}
	if _, err := g.Client.ReplayDeadLetter(ctx, seq); err != nil {
		t.Fatal(err)
	}
	kept("the replay's pending status")
	if r := g.Do("DELETE", "/_jetway/jobs/"+id, nil); r.Status != http.StatusOK {
		t.Fatalf("cancel: %d %s", r.Status, r.Body)
	}
	kept("the cancel")
}

// A finished job's status is kept past a redelivery after a lost ack,
// however short its result_ttl: a job found with no status would run
// again.
func TestAsyncShortResultTTLOutlivesARedelivery(t *testing.T) {
	g, js := startWithoutJobWorker(t)
	b := newJobBackend(t, 200)
	g.Publish(asyncAPI("brief", b, `{"result_ttl":"1s"}`, ""))
	loc, id := submit(t, g, "/brief", "x")
	g.AddWorker("jobs")
	waitJob(t, g, loc, registry.JobSucceeded)
	if kept := statusKept(t, js, id); kept < 5*time.Minute {
		t.Fatalf("the final status is kept %v", kept)
	}
}

// A replay the jobs stream refuses puts the job's status back as it was:
// left pending, with no message behind it, the replay could not be tried
// again (a job that has not ended is not replayed) for as long as the
// pending status lives.
func TestAsyncRefusedReplayCanBeTriedAgain(t *testing.T) {
	g, js := startWithoutJobWorker(t)
	b := newJobBackend(t, 200)
	g.Publish(asyncAPI("crowded", b, `{}`, ""))
	ctx := context.Background()
	s, err := js.Stream(ctx, bus.StreamJobs)
	if err != nil {
		t.Fatal(err)
	}
	room := s.CachedInfo().Config
	full := room
	full.MaxMsgsPerSubject = 1 // the API's queue holds one job: the one below
	if _, err := js.UpdateStream(ctx, full); err != nil {
		t.Fatal(err)
	}
	submit(t, g, "/crowded", "x")

	id := registry.NewJobID("jobs")
	jobs, err := registry.NewJobStore(g.Conn)
	if err != nil {
		t.Fatal(err)
	}
	if err := jobs.Create(ctx, &registry.JobStatus{ID: id, API: "crowded", Tier: bus.TierAPI, Pool: "jobs", State: registry.JobFailed,
		Reason: registry.ReasonExhausted, Attempts: 3, Submitted: time.Now().UTC()}, time.Hour); err != nil {
		t.Fatal(err)
	}
	seq := putDeadLetter(t, js, "crowded", id)
	if _, err := g.Client.ReplayDeadLetter(ctx, seq); err == nil {
		t.Fatal("a replay into a full queue was taken")
	}
	if st, err := jobs.Get(ctx, id); err != nil || st.State != registry.JobFailed || st.Attempts != 3 {
		t.Fatalf("after a refused replay the status is %+v (%v), want it failed as before", st, err)
	}
	if _, err := js.UpdateStream(ctx, room); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Client.ReplayDeadLetter(ctx, seq); err != nil {
		t.Fatalf("the replay tried again: %v", err)
	}
	if st, err := jobs.Get(ctx, id); err != nil || st.State != registry.JobPending {
		t.Fatalf("replayed: %+v %v", st, err)
	}
}

// A waiting job's status is kept as long as any job may wait in the
// stream, not its API's max_age: a status gone would show the job as
// unknown while it waits, and a max_age raised meanwhile would run a job
// no one could see or cancel.
func TestAsyncPendingStatusOutlivesAnyWait(t *testing.T) {
	g, js := startWithoutJobWorker(t)
	b := newJobBackend(t, 200)
	g.Publish(asyncAPI("waiting", b, `{"max_age":"1h","result_ttl":"1h"}`, ""))
	_, id := submit(t, g, "/waiting", "x")
	if kept := statusKept(t, js, id); kept < registry.MaxAsyncAge {
		t.Fatalf("the pending status is kept %v; a job may wait %v", kept, registry.MaxAsyncAge)
	}
}

// A replayed job's wait is counted from the replay, at its retries as at
// its delivery: a job submitted two days ago, replayed, whose first
// attempt fails, is retried — not ended as expired under a max_age of a
// day.
func TestAsyncReplayedJobIsRetriedWithinItsWait(t *testing.T) {
	g, js := startWithoutJobWorker(t)
	b := newJobBackend(t, 200)
	b.script = []int{500, 200}
	g.Publish(asyncAPI("retried", b, `{"max_age":"24h","attempts":3,"backoff":"10ms"}`, ""))
	ctx := context.Background()
	id := registry.NewJobID("jobs")
	jobs, err := registry.NewJobStore(g.Conn)
	if err != nil {
		t.Fatal(err)
	}
	if err := jobs.Create(ctx, &registry.JobStatus{ID: id, API: "retried", Tier: bus.TierAPI, Pool: "jobs", State: registry.JobFailed,
		Submitted: time.Now().Add(-48 * time.Hour).UTC()}, time.Hour); err != nil {
		t.Fatal(err)
	}
	seq := putDeadLetter(t, js, "retried", id)
	if _, err := g.Client.ReplayDeadLetter(ctx, seq); err != nil {
		t.Fatal(err)
	}
	g.AddWorker("jobs")
	if st := waitJob(t, g, "/_jetway/jobs/"+id, registry.JobSucceeded); st.Attempts != 2 {
		t.Fatalf("replayed: %+v", st)
	}
}

// statusKept is how long the status bucket keeps job id's status as it
// is now (its Nats-TTL).
func statusKept(t *testing.T, js jetstream.JetStream, id string) time.Duration {
	t.Helper()
	kv, err := js.Stream(context.Background(), "KV_"+bus.BucketJobs)
	if err != nil {
		t.Fatal(err)
	}
	m, err := kv.GetLastMsgForSubject(context.Background(), bus.JobStatusSubject(id))
	if err != nil {
		t.Fatal(err)
	}
	ttl, err := time.ParseDuration(m.Header.Get("Nats-TTL"))
	if err != nil {
		t.Fatalf("job %s's status has TTL %q: %v", id, m.Header.Get("Nats-TTL"), err)
	}
	return ttl
}

// putDeadLetter stores the dead letter of job id of API api (pool jobs),
// its retries exhausted, with the headers given in pairs, and returns its
// sequence.
func putDeadLetter(t *testing.T, js jetstream.JetStream, api, id string, headers ...string) uint64 {
	t.Helper()
	h := nats.Header{}
	h.Set(bus.HdrJobID, id)
	for i := 0; i+1 < len(headers); i += 2 {
		h.Set(headers[i], headers[i+1])
	}
	h.Set(registry.HdrDeadReason, registry.ReasonExhausted)
	h.Set(registry.HdrDeadState, registry.JobFailed)
	ack, err := js.PublishMsg(context.Background(), &nats.Msg{Subject: bus.DeadLetterSubject("jobs", bus.TierAPI, api), Header: h, Data: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}
