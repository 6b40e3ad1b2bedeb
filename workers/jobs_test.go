package workers_test

// Async jobs (docs/async.md) through a whole gateway: the edge accepts
// with 202, a worker runs the job from the jobs stream with retries, its
// caller reads the status and the result, and what ends without success
// lands in the dead letters.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/internal/jetwaytest"
	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/sign"
)

// jobBackend answers each call with the next status of script (the last
// one for ever after), and remembers each call's headers and body.
type jobBackend struct {
	*httptest.Server
	mu     sync.Mutex
	script []int
	calls  []*http.Request
	bodies []string
	hold   chan struct{} // when set, calls wait for it
}

func newJobBackend(t *testing.T, script ...int) *jobBackend {
	b := &jobBackend{script: script}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		b.mu.Lock()
		n := len(b.calls)
		b.calls = append(b.calls, r.Clone(context.Background()))
		b.bodies = append(b.bodies, string(body))
		status := b.script[min(n, len(b.script)-1)]
		hold := b.hold
		b.mu.Unlock()
		if hold != nil {
			<-hold
		}
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("X-Backend", "yes")
		w.WriteHeader(status)
		fmt.Fprintf(w, "answer %d to %s", n+1, body)
	}))
	t.Cleanup(b.Close)
	return b
}

func (b *jobBackend) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.calls)
}

func asyncAPI(name string, b *jobBackend, async string, extra string) string {
	return fmt.Sprintf(`{"name":%q,"pool":"jobs","route":{"method":"POST","path":"/%s"},"backend":{"type":"http","url":%q},"timeout":"2s","async":%s%s}`,
		name, name, b.URL, async, extra)
}

// submit posts an async call and returns the job's address.
func submit(t *testing.T, g *jetwaytest.Gateway, path, body string, hdr ...string) (loc, id string) {
	t.Helper()
	r := g.Do("POST", path, strings.NewReader(body), append([]string{"Prefer", "respond-async"}, hdr...)...)
	if r.Status != http.StatusAccepted {
		t.Fatalf("submit: %d %s, want 202", r.Status, r.Body)
	}
	var got struct{ ID, State, Location string }
	if err := json.Unmarshal([]byte(r.Body), &got); err != nil {
		t.Fatal(err)
	}
	loc = r.Header.Get("Location")
	if loc == "" || loc != got.Location || !strings.HasSuffix(loc, "/"+got.ID) || r.Header.Get("Retry-After") == "" {
		t.Fatalf("202 without its address: %v %s", r.Header, r.Body)
	}
	return loc, got.ID
}

// waitJob polls a job until it is in state.
func waitJob(t *testing.T, g *jetwaytest.Gateway, loc, state string, hdr ...string) registry.JobStatus {
	t.Helper()
	var st registry.JobStatus
	natstest.CheckFor(t, 15*time.Second, 20*time.Millisecond, func() error {
		r := g.Do("GET", loc, nil, hdr...)
		if r.Status != http.StatusOK {
			return fmt.Errorf("GET %s: %d %s", loc, r.Status, r.Body)
		}
		st = registry.JobStatus{}
		if err := json.Unmarshal([]byte(r.Body), &st); err != nil {
			return err
		}
		if st.State != state {
			return fmt.Errorf("job is %s (attempts %d, last error %+v), want %s", st.State, st.Attempts, st.LastError, state)
		}
		return nil
	})
	return st
}

func TestAsyncJobRunsAndKeepsItsResult(t *testing.T) {
	g := jetwaytest.Start(t)
	b := newJobBackend(t, 201)
	g.Publish(asyncAPI("orders", b, `{}`, ""))

	loc, id := submit(t, g, "/orders", `{"n":1}`, "X-Custom", "kept")
	st := waitJob(t, g, loc, registry.JobSucceeded)
	if st.ID != id || st.Attempts != 1 || st.API != "orders" || st.Result == nil || st.Result.Status != 201 ||
		st.Result.Body == nil || *st.Result.Body != `answer 1 to {"n":1}` {
		t.Fatalf("status %+v result %+v", st, st.Result)
	}
	r := g.Do("GET", loc+"/result", nil)
	if r.Status != 201 || r.Body != `answer 1 to {"n":1}` || r.Header.Get("X-Backend") != "yes" || r.Header.Get("X-Jetway-Job-State") != "succeeded" {
		t.Fatalf("result: %d %v %s", r.Status, r.Header, r.Body)
	}
	// The backend was called once, synchronously, with the caller's
	// headers and the job's id as its Idempotency-Key.
	b.mu.Lock()
	call := b.calls[0]
	b.mu.Unlock()
	if b.count() != 1 || call.Header.Get("X-Custom") != "kept" || call.Header.Get("Prefer") != "" || call.Header.Get("Idempotency-Key") != id {
		t.Fatalf("backend calls %d, headers %v", b.count(), call.Header)
	}
	// A call without Prefer is an ordinary call.
	if r := g.Do("POST", "/orders", strings.NewReader("x")); r.Status != 201 || !strings.HasPrefix(r.Body, "answer 2") {
		t.Fatalf("sync call: %d %s", r.Status, r.Body)
	}
}

func TestAsyncRetriesWithBackoffThenSucceeds(t *testing.T) {
	g := jetwaytest.Start(t)
	b := newJobBackend(t, 503, 500, 200)
	g.Publish(asyncAPI("flaky", b, `{"attempts":3,"backoff":"20ms","max_backoff":"50ms"}`, ""))
	loc, _ := submit(t, g, "/flaky", "x")
	st := waitJob(t, g, loc, registry.JobSucceeded)
	if st.Attempts != 3 || b.count() != 3 || st.LastError != nil {
		t.Fatalf("attempts %d, backend calls %d, status %+v", st.Attempts, b.count(), st)
	}
	// Every attempt carried the same Idempotency-Key.
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range b.calls {
		if c.Header.Get("Idempotency-Key") != b.calls[0].Header.Get("Idempotency-Key") || c.Header.Get("Idempotency-Key") == "" {
			t.Fatalf("idempotency keys differ between attempts")
		}
	}
}

// deadLetter reads the newest dead letter of an API.
func deadLetter(t *testing.T, g *jetwaytest.Gateway, api string) jetstream.RawStreamMsg {
	t.Helper()
	js, err := jetstream.New(g.Conn)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(context.Background(), bus.StreamDeadLetters)
	if err != nil {
		t.Fatal(err)
	}
	var m *jetstream.RawStreamMsg
	natstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		m, err = s.GetLastMsgForSubject(context.Background(), bus.DeadLetterSubject("jobs", bus.TierAPI, api))
		return err
	})
	return *m
}

func TestAsyncFailuresEndInTheDeadLetters(t *testing.T) {
	g := jetwaytest.Start(t)
	down := newJobBackend(t, 500)
	g.Publish(asyncAPI("down", down, `{"attempts":2,"backoff":"10ms"}`, ""))
	loc, id := submit(t, g, "/down", "payload")
	st := waitJob(t, g, loc, registry.JobFailed)
	if st.Reason != registry.ReasonExhausted || st.Attempts != 2 || down.count() != 2 || st.LastError == nil || st.LastError.Status != 500 {
		t.Fatalf("status %+v, calls %d", st, down.count())
	}
	m := deadLetter(t, g, "down")
	if m.Header.Get(registry.HdrDeadReason) != registry.ReasonExhausted || m.Header.Get(bus.HdrJobID) != id ||
		m.Header.Get(registry.HdrDeadAttempts) != "2" || string(m.Data) != "payload" || !strings.HasPrefix(m.Header.Get(registry.HdrDeadError), "500") {
		t.Fatalf("dead letter: %v %q", m.Header, m.Data)
	}

	// The operator lists it, mends the backend and replays it: the same
	// job, at the same address, runs again and succeeds.
	dls, err := g.Client.DeadLetters(context.Background(), "down", 10)
	if err != nil || len(dls) != 1 || dls[0].Job != id || dls[0].Reason != registry.ReasonExhausted || dls[0].Method != "POST" ||
		dls[0].Path != "/down" || dls[0].Size != len("payload") || dls[0].Attempts != 2 || dls[0].Pool != "jobs" {
		t.Fatalf("dead letters %+v, %v", dls, err)
	}
	down.mu.Lock()
	down.script = []int{200}
	down.mu.Unlock()
	if _, err := g.Client.ReplayDeadLetter(context.Background(), dls[0].Seq); err != nil {
		t.Fatal(err)
	}
	st = waitJob(t, g, loc, registry.JobSucceeded)
	if st.Attempts != 1 || down.count() != 3 || st.Result.Status != 200 || *st.Result.Body != "answer 3 to payload" {
		t.Fatalf("replayed: %+v, calls %d", st, down.count())
	}
	if dls, err := g.Client.DeadLetters(context.Background(), "down", 10); err != nil || len(dls) != 0 {
		t.Fatalf("the replayed dead letter stays: %+v %v", dls, err)
	}
	if _, err := g.Client.ReplayDeadLetter(context.Background(), dls[0].Seq); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("replaying it twice: %v", err)
	}

	// A failure the API does not retry ends at once.
	missing := newJobBackend(t, 404)
	g.Publish(asyncAPI("missing", missing, `{"attempts":5,"backoff":"10ms"}`, ""))
	loc, _ = submit(t, g, "/missing", "x")
	st = waitJob(t, g, loc, registry.JobFailed)
	if st.Reason != registry.ReasonFailed || st.Attempts != 1 || missing.count() != 1 || st.Result == nil || st.Result.Status != 404 {
		t.Fatalf("status %+v, calls %d", st, missing.count())
	}
	if m := deadLetter(t, g, "missing"); m.Header.Get(registry.HdrDeadReason) != registry.ReasonFailed {
		t.Fatalf("dead letter: %v", m.Header)
	}
	if n, err := g.Client.PurgeDeadLetters(context.Background(), "missing"); err != nil || n != 1 {
		t.Fatalf("purge: %d %v", n, err)
	}
	if dls, err := g.Client.DeadLetters(context.Background(), "", 10); err != nil || len(dls) != 0 {
		t.Fatalf("after the purge: %+v %v", dls, err)
	}
}

func TestAsyncIdempotencyKeyMakesOneJob(t *testing.T) {
	g := jetwaytest.Start(t)
	b := newJobBackend(t, 200)
	g.Publish(asyncAPI("once", b, `{}`, ""))
	loc1, id1 := submit(t, g, "/once", "a", "Idempotency-Key", "order-7")
	waitJob(t, g, loc1, registry.JobSucceeded)
	loc2, id2 := submit(t, g, "/once", "a", "Idempotency-Key", "order-7")
	if id1 != id2 || loc1 != loc2 {
		t.Fatalf("the same key made two jobs: %s %s", id1, id2)
	}
	_, id3 := submit(t, g, "/once", "a", "Idempotency-Key", "order-8")
	if id3 == id1 {
		t.Fatal("another key found the first job")
	}
	natstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if n := b.count(); n != 2 {
			return fmt.Errorf("backend called %d times, want 2", n)
		}
		return nil
	})
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.calls[0].Header.Get("Idempotency-Key") != "order-7" {
		t.Fatalf("the caller's key did not reach the backend: %v", b.calls[0].Header)
	}
}

func TestAsyncJobsAreTheirAppsOnly(t *testing.T) {
	g := jetwaytest.Start(t)
	b := newJobBackend(t, 200)
	g.Publish(asyncAPI("private", b, `{"mode":"always"}`, `,"auth":{"methods":["key"]}`))
	keyA := g.PutKeyedApp("app-a", "private")
	keyB := g.PutKeyedApp("app-b", "private")

	// Refusals come before any job: no key, a wrong one, an unknown route.
	if r := g.Do("POST", "/private", strings.NewReader("x")); r.Status != 401 {
		t.Fatalf("no key: %d %s", r.Status, r.Body)
	}
	if r := g.Do("POST", "/nope", strings.NewReader("x"), "Prefer", "respond-async"); r.Status != 404 || r.Code != "ROUTE_NOT_FOUND" {
		t.Fatalf("unknown API: %d %s", r.Status, r.Body)
	}
	// mode always: no Prefer needed.
	r := g.Do("POST", "/private", strings.NewReader("x"), "X-Api-Key", keyA)
	if r.Status != 202 {
		t.Fatalf("submit: %d %s", r.Status, r.Body)
	}
	loc := r.Header.Get("Location")
	st := waitJob(t, g, loc, registry.JobSucceeded, "X-Api-Key", keyA)
	if st.App != "app-a" {
		t.Fatalf("app %q", st.App)
	}
	if r := g.Do("GET", loc, nil, "X-Api-Key", keyB); r.Status != 404 || r.Code != "JOB_NOT_FOUND" {
		t.Fatalf("another app read the job: %d %s", r.Status, r.Body)
	}
	if r := g.Do("GET", loc, nil); r.Status != 401 {
		t.Fatalf("no key read the job: %d %s", r.Status, r.Body)
	}
	if r := g.Do("DELETE", loc, nil, "X-Api-Key", keyB); r.Status != 404 {
		t.Fatalf("another app cancelled: %d %s", r.Status, r.Body)
	}
	if r := g.Do("GET", "/_jetway/jobs/notanid", nil); r.Status != 404 || r.Code != "JOB_NOT_FOUND" {
		t.Fatalf("bad id: %d %s", r.Status, r.Body)
	}
	if r := g.Do("PUT", loc, nil, "X-Api-Key", keyA); r.Status != 405 {
		t.Fatalf("PUT: %d %s", r.Status, r.Body)
	}
}

func TestAsyncCancelAPendingJob(t *testing.T) {
	g := jetwaytest.Start(t)
	b := newJobBackend(t, 503)
	g.Publish(asyncAPI("cancel", b, `{"attempts":5,"backoff":"1500ms","max_backoff":"1500ms"}`, ""))
	loc, id := submit(t, g, "/cancel", "x")
	// After its first attempt failed, the job waits for its second.
	natstest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		r := g.Do("GET", loc, nil)
		if !strings.Contains(r.Body, `"state":"pending"`) || !strings.Contains(r.Body, `"attempts":1`) {
			return fmt.Errorf("job: %s", r.Body)
		}
		return nil
	})
	r := g.Do("DELETE", loc, nil)
	if r.Status != 200 || !strings.Contains(r.Body, `"state":"cancelled"`) {
		t.Fatalf("cancel: %d %s", r.Status, r.Body)
	}
	if r := g.Do("DELETE", loc, nil); r.Status != 409 || r.Code != "CONFLICT" {
		t.Fatalf("cancel again: %d %s", r.Status, r.Body)
	}
	m := deadLetter(t, g, "cancel")
	if m.Header.Get(registry.HdrDeadReason) != registry.ReasonCancelled || m.Header.Get(bus.HdrJobID) != id {
		t.Fatalf("dead letter: %v", m.Header)
	}
	time.Sleep(100 * time.Millisecond)
	if n := b.count(); n != 1 {
		t.Fatalf("a cancelled job ran again: %d calls", n)
	}
}

func TestAsyncJobExpires(t *testing.T) {
	g := jetwaytest.Start(t)
	b := newJobBackend(t, 503)
	g.Publish(asyncAPI("expiring", b, `{"attempts":10,"backoff":"200ms","max_backoff":"200ms","max_age":"300ms"}`, ""))
	loc, _ := submit(t, g, "/expiring", "x")
	st := waitJob(t, g, loc, registry.JobDead)
	if st.Reason != registry.ReasonExpired || st.Attempts >= 10 {
		t.Fatalf("status %+v", st)
	}
	if m := deadLetter(t, g, "expiring"); m.Header.Get(registry.HdrDeadReason) != registry.ReasonExpired {
		t.Fatalf("dead letter: %v", m.Header)
	}
}

// TestAsyncJobsShareTheBulkhead: jobs count against the API's concurrency
// like calls, so a burst of jobs never runs more at once than the API
// allows, and every job still runs exactly once.
func TestAsyncJobsShareTheBulkhead(t *testing.T) {
	g := jetwaytest.Start(t)
	var running, most atomic.Int64
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := running.Add(1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		time.Sleep(5 * time.Millisecond)
		running.Add(-1)
		calls.Add(1)
	}))
	t.Cleanup(srv.Close)
	g.Publish(fmt.Sprintf(`{"name":"burst","pool":"jobs","route":{"method":"POST","path":"/burst"},"backend":{"type":"http","url":%q},"concurrency":3,"async":{"mode":"always"}}`, srv.URL))
	const jobs = 60
	locs := make([]string, jobs)
	for i := range jobs {
		r := g.Do("POST", "/burst", strings.NewReader("x"))
		if r.Status != 202 {
			t.Fatalf("submit %d: %d %s", i, r.Status, r.Body)
		}
		locs[i] = r.Header.Get("Location")
	}
	for _, loc := range locs {
		waitJob(t, g, loc, registry.JobSucceeded)
	}
	if calls.Load() != jobs || most.Load() > 3 {
		t.Fatalf("%d calls for %d jobs, %d at once (limit 3)", calls.Load(), jobs, most.Load())
	}
}

// TestAsyncBurstLosesNoneRunsNoneTwice: a burst of 10,000 submits from
// many callers at once is accepted or refused (never a third answer);
// every accepted job runs exactly once and ends succeeded. 2,000 under
// the race detector, 300 with -short.
func TestAsyncBurstLosesNoneRunsNoneTwice(t *testing.T) {
	n := 10_000
	switch {
	case testing.Short():
		n = 300
	case raceEnabled:
		n = 2000
	}
	g := jetwaytest.Start(t)
	var seen sync.Map // Idempotency-Key → *atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _ := seen.LoadOrStore(r.Header.Get("Idempotency-Key"), new(atomic.Int64))
		c.(*atomic.Int64).Add(1)
	}))
	t.Cleanup(srv.Close)
	g.Publish(fmt.Sprintf(`{"name":"burst","pool":"jobs","route":{"method":"POST","path":"/burst"},"backend":{"type":"http","url":%q},"concurrency":32,"async":{"mode":"always"}}`, srv.URL))
	var mu sync.Mutex
	var ids []string
	var refused atomic.Int64
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				r := g.Do("POST", "/burst", strings.NewReader("x"))
				switch {
				case r.Status == 202:
					var got struct{ ID string }
					_ = json.Unmarshal([]byte(r.Body), &got)
					mu.Lock()
					ids = append(ids, got.ID)
					mu.Unlock()
				case r.Status == 429 || r.Status == 503:
					refused.Add(1)
				default:
					t.Errorf("submit: %d %s", r.Status, r.Body)
				}
			}
		}()
	}
	wg.Wait()
	if len(ids)+int(refused.Load()) != n {
		t.Fatalf("%d accepted + %d refused of %d", len(ids), refused.Load(), n)
	}
	natstest.CheckFor(t, 60*time.Second, 50*time.Millisecond, func() error {
		ran := 0
		for _, id := range ids {
			if c, ok := seen.Load(id); ok {
				if k := c.(*atomic.Int64).Load(); k != 1 {
					return fmt.Errorf("job %s ran %d times", id, k)
				}
				ran++
			}
		}
		if ran != len(ids) {
			return fmt.Errorf("%d of %d accepted jobs ran", ran, len(ids))
		}
		return nil
	})
	for _, id := range ids[:min(len(ids), 50)] {
		if st := waitJob(t, g, "/_jetway/jobs/"+id, registry.JobSucceeded); st.Attempts != 1 {
			t.Fatalf("job %s: %+v", id, st)
		}
	}
	t.Logf("%d accepted, %d refused", len(ids), refused.Load())
}

// TestAsyncJobEvents: a job's event stream sends its status now and each
// change, and ends when the job does.
func TestAsyncJobEvents(t *testing.T) {
	g := jetwaytest.Start(t)
	b := newJobBackend(t, 503, 200)
	b.hold = make(chan struct{})
	g.Publish(asyncAPI("watched", b, `{"attempts":2,"backoff":"30ms","max_backoff":"30ms"}`, ""))
	loc, _ := submit(t, g, "/watched", "x")
	resp, err := jetwaytest.Client.Get(g.URL + loc + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("events: %d %v", resp.StatusCode, resp.Header)
	}
	close(b.hold)
	body, err := io.ReadAll(resp.Body) // ends with the job
	if err != nil {
		t.Fatal(err)
	}
	var states []string
	for _, line := range strings.Split(string(body), "\n") {
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			var st registry.JobStatus
			if err := json.Unmarshal([]byte(d), &st); err != nil {
				t.Fatal(err)
			}
			states = append(states, fmt.Sprintf("%s/%d", st.State, st.Attempts))
		}
	}
	// Each change in order; a change overtaken by the next before the
	// stream read it (running/2, a moment before succeeded/2 on a loaded
	// machine) may be skipped, never reordered, and the end is always
	// there.
	got := strings.Join(states, " ")
	want := []string{"running/1", "pending/1", "running/2", "succeeded/2"}
	for len(states) > 0 && states[0] == "pending/0" {
		states = states[1:] // the status when the stream opened, before its first attempt
	}
	i := 0
	for _, st := range states {
		for i < len(want) && want[i] != st {
			if want[i] != "running/2" {
				t.Fatalf("events: %s (missing %s, or out of order)", got, want[i])
			}
			i++
		}
		if i == len(want) {
			t.Fatalf("events: %s (%s after the end)", got, st)
		}
		i++
	}
	if !strings.HasSuffix(got, "succeeded/2") || !strings.Contains(got, "pending/1") {
		t.Fatalf("events: %s", got)
	}
}

// callbackReceiver records the callbacks it gets; it answers fail times
// 500 first.
type callbackReceiver struct {
	*httptest.Server
	mu    sync.Mutex
	got   []*http.Request
	body  [][]byte
	fails atomic.Int64
}

func newCallbackReceiver(t *testing.T) *callbackReceiver {
	cr := &callbackReceiver{}
	cr.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		cr.mu.Lock()
		cr.got = append(cr.got, r.Clone(context.Background()))
		cr.body = append(cr.body, b)
		cr.mu.Unlock()
		if cr.fails.Add(-1) >= 0 {
			w.WriteHeader(500)
		}
	}))
	t.Cleanup(cr.Close)
	return cr
}

func (cr *callbackReceiver) count() int {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	return len(cr.got)
}

func TestAsyncCallbacks(t *testing.T) {
	g := jetwaytest.Start(t)
	b := newJobBackend(t, 200)
	cr := newCallbackReceiver(t)
	cr.fails.Store(2) // the receiver is down for two attempts
	g.Publish(asyncAPI("notified", b, fmt.Sprintf(`{"callbacks":{"allow":[%q],"allow_private":true,"backoff":"20ms","max_backoff":"40ms","on_success":{"subject":"svc.jobs.done"}}}`, cr.URL+"/hooks/"),
		`,"auth":{"methods":["key"]}`))
	key, rec, _ := registry.NewAPIKey()
	secret, _ := registry.NewHMACSecret()
	g.PutApps(&registry.App{ID: "acme", Status: registry.AppActive, Keys: []registry.AppKey{rec}, HMACSecrets: []registry.HMACSecret{secret}, APIs: []string{"*"}})
	done, err := g.Conn.SubscribeSync("svc.jobs.done")
	if err != nil {
		t.Fatal(err)
	}

	// Refused before any job: a URL the API does not allow, an address
	// that is not public when the API does not allow those.
	for _, u := range []string{"https://evil.example/hooks/", cr.URL + "/other/", "ftp://x/hooks/"} {
		if r := g.Do("POST", "/notified", strings.NewReader("x"), "X-Api-Key", key, "Prefer", "respond-async", "X-Callback-Url", u); r.Status != 400 {
			t.Fatalf("callback %s: %d %s", u, r.Status, r.Body)
		}
	}

	loc, id := submit(t, g, "/notified", "x", "X-Api-Key", key, "X-Callback-Url", cr.URL+"/hooks/done?ref=7")
	waitJob(t, g, loc, registry.JobSucceeded, "X-Api-Key", key)
	var st registry.JobStatus
	natstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		st = waitJob(t, g, loc, registry.JobSucceeded, "X-Api-Key", key)
		if len(st.Callbacks) != 2 || st.Callbacks[0].State != registry.CallbackDelivered || st.Callbacks[1].State != registry.CallbackDelivered {
			return fmt.Errorf("callbacks %+v", st.Callbacks)
		}
		return nil
	})
	if st.Callbacks[0].Attempts != 3 || st.Callbacks[0].To != cr.URL+"/hooks/done?ref=7" || st.Callbacks[1].To != "nats:svc.jobs.done" {
		t.Fatalf("callbacks %+v", st.Callbacks)
	}
	cr.mu.Lock()
	last, body := cr.got[len(cr.got)-1], cr.body[len(cr.body)-1]
	cr.mu.Unlock()
	if last.URL.Path != "/hooks/done" || last.URL.RawQuery != "ref=7" || last.Header.Get("Jetway-Job-State") != "succeeded" {
		t.Fatalf("callback %v %v", last.URL, last.Header)
	}
	got, err := sign.VerifyCallback(last, body, "acme", [][]byte{secret.Bytes()}, time.Minute, time.Now())
	if err != nil || got != id {
		t.Fatalf("callback signature: %s %v", got, err)
	}
	if _, err := sign.VerifyCallback(last, append(body, ' '), "acme", [][]byte{secret.Bytes()}, time.Minute, time.Now()); err == nil {
		t.Fatal("a changed body verified")
	}
	var sent registry.JobStatus
	if err := json.Unmarshal(body, &sent); err != nil || sent.ID != id || sent.State != registry.JobSucceeded || sent.Result == nil {
		t.Fatalf("callback body %s", body)
	}
	m, err := done.NextMsg(5 * time.Second)
	if err != nil || m.Header.Get("Jetway-Job") != id {
		t.Fatalf("on_success: %v %v", m, err)
	}

	// An open API's caller has no secret to verify a callback with.
	open := newJobBackend(t, 200)
	g.Publish(asyncAPI("opencb", open, fmt.Sprintf(`{"callbacks":{"allow":[%q],"allow_private":true}}`, cr.URL+"/"), ""))
	if r := g.Do("POST", "/opencb", strings.NewReader("x"), "Prefer", "respond-async", "X-Callback-Url", cr.URL+"/x"); r.Status != 400 {
		t.Fatalf("open API callback: %d %s", r.Status, r.Body)
	}
}

// A callback may not reach inside the network: an address literal that
// is not public is refused at submit, and a name that resolves to one is
// refused when the worker connects — the callback fails and is a dead
// letter; the job still succeeded.
func TestAsyncCallbacksStayOutside(t *testing.T) {
	g := jetwaytest.Start(t)
	b := newJobBackend(t, 200)
	cr := newCallbackReceiver(t)
	port := cr.URL[strings.LastIndex(cr.URL, ":")+1:]
	g.Publish(asyncAPI("outside", b, fmt.Sprintf(`{"callbacks":{"allow":["http://localhost:%s/","%s/"],"attempts":1}}`, port, cr.URL),
		`,"auth":{"methods":["key"]}`))
	key, rec, _ := registry.NewAPIKey()
	secret, _ := registry.NewHMACSecret()
	g.PutApps(&registry.App{ID: "acme", Status: registry.AppActive, Keys: []registry.AppKey{rec}, HMACSecrets: []registry.HMACSecret{secret}, APIs: []string{"*"}})
	if r := g.Do("POST", "/outside", strings.NewReader("x"), "X-Api-Key", key, "Prefer", "respond-async", "X-Callback-Url", cr.URL+"/in"); r.Status != 400 {
		t.Fatalf("a loopback address literal: %d %s", r.Status, r.Body)
	}
	loc, _ := submit(t, g, "/outside", "x", "X-Api-Key", key, "X-Callback-Url", "http://localhost:"+port+"/in")
	natstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		st := waitJob(t, g, loc, registry.JobSucceeded, "X-Api-Key", key)
		if len(st.Callbacks) != 1 || st.Callbacks[0].State != registry.CallbackFailed || !strings.Contains(st.Callbacks[0].LastError, "not a public address") {
			return fmt.Errorf("callbacks %+v", st.Callbacks)
		}
		return nil
	})
	if cr.count() != 0 {
		t.Fatal("the callback reached a loopback address")
	}
	dls, err := g.Client.DeadLetters(context.Background(), "outside", 10)
	if err != nil || len(dls) != 1 || dls[0].Reason != registry.ReasonCallback || dls[0].Tier != "callback" {
		t.Fatalf("dead letters %+v %v", dls, err)
	}
}

func TestAsyncJobMetrics(t *testing.T) {
	g := jetwaytest.Start(t)
	b := newJobBackend(t, 503, 200)
	g.Publish(asyncAPI("counted", b, `{"backoff":"10ms"}`, ""))
	loc, _ := submit(t, g, "/counted", "x")
	waitJob(t, g, loc, registry.JobSucceeded)
	var out strings.Builder
	if err := g.Worker.WriteJobMetrics(&out, "w1"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`jetway_jobs_total{api="counted",event="attempt",node="w1"} 2`,
		`jetway_jobs_total{api="counted",event="retry",node="w1"} 1`,
		`jetway_jobs_total{api="counted",event="succeeded",node="w1"} 1`,
		`jetway_jobs_total{api="counted",event="failed",node="w1"} 0`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("metrics lack %s:\n%s", want, out.String())
		}
	}
	qs, err := registry.ReadJobQueues(context.Background(), mustJS(t, g))
	if err != nil || len(qs) != 0 {
		t.Fatalf("queues after the job: %+v %v", qs, err)
	}
}

func mustJS(t *testing.T, g *jetwaytest.Gateway) jetstream.JetStream {
	js, err := jetstream.New(g.Conn)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// The queues as the streams say: jobs waiting for a pool with no worker,
// their oldest's age, and the dead letters.
func TestReadJobQueues(t *testing.T) {
	g := jetwaytest.Start(t, "other") // no worker takes pool jobs
	b := newJobBackend(t, 200)
	g.Publish(asyncAPI("waiting", b, `{}`, ""))
	start := time.Now()
	for range 3 {
		r := g.Do("POST", "/waiting", strings.NewReader("x"), "Prefer", "respond-async")
		if r.Status != 202 {
			t.Fatalf("submit: %d %s", r.Status, r.Body)
		}
	}
	qs, err := registry.ReadJobQueues(context.Background(), mustJS(t, g))
	if err != nil || len(qs) != 1 || qs[0].API != "waiting" || qs[0].Queued != 3 || qs[0].Oldest.Before(start.Add(-time.Second)) || qs[0].Oldest.After(time.Now()) {
		t.Fatalf("queues %+v %v", qs, err)
	}
}

// A result larger than the API keeps with the status is stored as an
// object of its own and served whole.
func TestAsyncLargeResultStored(t *testing.T) {
	g := jetwaytest.Start(t)
	big := strings.Repeat("0123456789abcdef", 64<<10) // 1 MiB
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, big)
	}))
	t.Cleanup(srv.Close)
	g.Publish(fmt.Sprintf(`{"name":"export","pool":"jobs","route":{"method":"POST","path":"/export"},"backend":{"type":"http","url":%q},"async":{"max_result":"1KiB"}}`, srv.URL))
	loc, _ := submit(t, g, "/export", "x")
	st := waitJob(t, g, loc, registry.JobSucceeded)
	if st.Result == nil || st.Result.Body != nil || st.Result.Omitted || st.Result.Stored == "" || st.Result.Size != len(big) {
		t.Fatalf("result %+v", st.Result)
	}
	r := g.Do("GET", loc+"/result", nil)
	if r.Status != 200 || r.Body != big || r.Header.Get("Content-Type") != "text/plain" {
		t.Fatalf("stored result: %d, %d bytes", r.Status, len(r.Body))
	}
}
