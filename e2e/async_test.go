package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/bus/natstest"
)

// jobView is the part of a job's status these tests read.
type jobView struct {
	ID       string `json:"id"`
	State    string `json:"state"`
	Reason   string `json:"reason"`
	Attempts int    `json:"attempts"`
	Result   *struct {
		Status int     `json:"status"`
		Body   *string `json:"body"`
	} `json:"result"`
}

// submitJob posts an async call and returns the job's address.
func submitJob(t *testing.T, url, body string, hdr http.Header) string {
	t.Helper()
	if hdr == nil {
		hdr = http.Header{}
	}
	hdr.Set("Prefer", "respond-async")
	r, err := do("POST", url, strings.NewReader(body), hdr)
	if err != nil {
		t.Fatal(err)
	}
	if r.status != http.StatusAccepted || r.header.Get("Location") == "" {
		t.Fatalf("submit to %s: %v, want 202 with a Location", url, r)
	}
	return r.header.Get("Location")
}

// waitJobState polls a job until it is in state.
func waitJobState(t *testing.T, url, state string, timeout time.Duration, hdr http.Header) jobView {
	t.Helper()
	var j jobView
	natstest.CheckFor(t, timeout, 50*time.Millisecond, func() error {
		r, err := do("GET", url, nil, hdr)
		if err != nil {
			return err
		}
		if r.status != http.StatusOK {
			return fmt.Errorf("GET %s: %v", url, r)
		}
		j = jobView{}
		if err := json.Unmarshal(r.body, &j); err != nil {
			return err
		}
		if j.State != state {
			return fmt.Errorf("job %s is %s after %d attempts, want %s", j.ID, j.State, j.Attempts, state)
		}
		return nil
	})
	return j
}

// Async calls through serve with its NATS users per role: the edge takes
// the job, the embedded worker (the worker user) runs it; a job that
// fails lands in the dead letters, which the CLI (the admin user) lists
// and replays as the same job.
func TestAsyncJobsThroughServe(t *testing.T) {
	t.Parallel()
	var failing atomic.Bool
	failing.Store(true)
	b := newBackend(t, func(_ *backend, w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if failing.Load() && r.URL.Path == "/flaky" {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		if r.URL.Path == "/big" {
			_, _ = io.WriteString(w, strings.Repeat("x", 100_000))
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusCreated)
		_, _ = fmt.Fprintf(w, "done %s key=%s", body, r.Header.Get("Idempotency-Key"))
	})
	srv, withUser := startAuthServe(t)
	admin := withUser("admin")
	putAPI(t, admin, entry("reports", "reports", "POST", "/v1/reports", httpBackend(b.URL+"/reports"),
		map[string]any{"async": map[string]any{"callbacks": map[string]any{"on_success": map[string]any{"subject": "svc.e2e.done"}}},
			"auth": map[string]any{"methods": []string{"key"}}}))
	done, err := natsConn(t, admin).SubscribeSync("svc.e2e.done")
	if err != nil {
		t.Fatal(err)
	}
	putAPI(t, admin, entry("flaky", "reports", "POST", "/v1/flaky", httpBackend(b.URL+"/flaky"),
		map[string]any{"async": map[string]any{"attempts": 2, "backoff": "50ms"}}))
	putAPI(t, admin, entry("export", "reports", "POST", "/v1/export", httpBackend(b.URL+"/big"),
		map[string]any{"async": map[string]any{"max_result": "1KiB"}}))
	res := jetway(t, "", "app", "create", "acme", "--api", "reports", "--nats", admin)
	if res.code != 0 {
		t.Fatalf("app create: %s %s", res.stdout, res.stderr)
	}
	key := regexp.MustCompile(`jw_[A-Za-z0-9_-]+`).FindString(res.stdout)
	if key == "" {
		t.Fatalf("no key in %q", res.stdout)
	}
	auth := http.Header{"X-Api-Key": {key}}
	waitStatus(t, srv.edge+"/v1/reports", http.StatusMethodNotAllowed) // routed

	var loc string
	natstest.CheckFor(t, applyTimeout, pollEvery, func() error { // the app reaches the edge
		r, err := do("POST", srv.edge+"/v1/reports", strings.NewReader("march"), http.Header{"X-Api-Key": {key}, "Prefer": {"respond-async"}})
		if err != nil || r.status != http.StatusAccepted {
			return fmt.Errorf("submit: %v %v", r, err)
		}
		loc = r.header.Get("Location")
		return nil
	})
	j := waitJobState(t, srv.edge+loc, "succeeded", 10*time.Second, auth)
	if j.Attempts != 1 || j.Result == nil || j.Result.Status != 201 || j.Result.Body == nil || *j.Result.Body != "done march key="+j.ID {
		t.Fatalf("job %+v (result %+v)", j, j.Result)
	}
	if r, _ := do("GET", srv.edge+loc, nil, nil); r.status != http.StatusUnauthorized {
		t.Fatalf("a job read without its app's key: %v", r)
	}
	// The API's on_success destination is told, by the worker's user.
	if m, err := done.NextMsg(10 * time.Second); err != nil || m.Header.Get("Jetway-Job") != j.ID {
		t.Fatalf("on_success: %v %v", m, err)
	}

	// A result larger than the status keeps: stored by the worker's user,
	// read back by the edge's.
	loc = submitJob(t, srv.edge+"/v1/export", "x", nil)
	waitJobState(t, srv.edge+loc, "succeeded", 10*time.Second, nil)
	if r, err := do("GET", srv.edge+loc+"/result", nil, nil); err != nil || r.status != 200 || len(r.body) != 100_000 {
		t.Fatalf("stored result: %v %v", r, err)
	}

	loc = submitJob(t, srv.edge+"/v1/flaky", "payload", nil)
	j = waitJobState(t, srv.edge+loc, "failed", 10*time.Second, nil)
	if j.Reason != "retries_exhausted" || j.Attempts != 2 {
		t.Fatalf("job %+v", j)
	}
	var seq string
	natstest.CheckFor(t, 5*time.Second, 50*time.Millisecond, func() error {
		res = jetway(t, "", "dlq", "list", "flaky", "--nats", admin)
		for _, line := range strings.Split(res.stdout, "\n") {
			if f := strings.Fields(line); len(f) >= 7 && f[3] == j.ID && f[5] == "retries_exhausted" && f[6] == "2" {
				seq = f[0]
				return nil
			}
		}
		return fmt.Errorf("dlq list (exit %d): %s %s", res.code, res.stdout, res.stderr)
	})
	res = jetway(t, "", "dlq", "show", seq, "--nats", admin)
	if res.code != 0 || !strings.Contains(res.stdout, `"body":"payload"`) || !strings.Contains(res.stdout, `"path":"/v1/flaky"`) {
		t.Fatalf("dlq show: %s %s", res.stdout, res.stderr)
	}
	failing.Store(false)
	if res = jetway(t, "", "dlq", "replay", seq, "--nats", admin); res.code != 0 || !strings.Contains(res.stdout, j.ID) {
		t.Fatalf("dlq replay: %s %s", res.stdout, res.stderr)
	}
	if j = waitJobState(t, srv.edge+loc, "succeeded", 10*time.Second, nil); *j.Result.Body != "done payload key="+j.ID {
		t.Fatalf("replayed job %+v", j)
	}
	if res = jetway(t, "", "dlq", "list", "--nats", withUser("edge")); res.code == 0 {
		t.Fatalf("an edge's user read the dead letters: %s", res.stdout)
	}
}

// A worker killed with -9 during a job's attempt: the job is delivered
// to another worker of the pool after the ack wait, runs once more with
// the same Idempotency-Key, and succeeds; the status counts both
// attempts.
func TestAsyncJobSurvivesAWorkerKilled(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var keys []string
	entered := make(chan struct{}, 4)
	b := newBackend(t, func(b *backend, w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		first := len(keys) == 1
		mu.Unlock()
		if first {
			entered <- struct{}{}
			b.block(w, r) // until the test ends: its worker dies meanwhile
			return
		}
		_, _ = io.WriteString(w, "done")
	})
	c := newCluster(t)
	edge := c.startEdge(t, "edge")
	first := startNode(t, "worker-1", "worker", "", "--nats", c.url, "--pool", "jobs", "--job-ack-wait", "2s")
	first.waitReady(t)
	putAPI(t, c.url, entry("slowjob", "jobs", "POST", "/v1/slowjob", httpBackend(b.URL+"/job"),
		map[string]any{"timeout": "1m", "async": map[string]any{"attempts": 3}}))
	first.waitServing(t, "slowjob")
	waitStatus(t, edge.edge+"/v1/slowjob", http.StatusMethodNotAllowed)
	loc := submitJob(t, edge.edge+"/v1/slowjob", "x", nil)
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the job never reached the backend")
	}
	waitJobState(t, edge.edge+loc, "running", 5*time.Second, nil)
	first.kill9(t)
	startNode(t, "worker-2", "worker", "", "--nats", c.url, "--pool", "jobs", "--job-ack-wait", "2s").waitReady(t)
	j := waitJobState(t, edge.edge+loc, "succeeded", 20*time.Second, nil)
	mu.Lock()
	defer mu.Unlock()
	if j.Attempts != 2 || len(keys) != 2 || keys[0] != keys[1] || keys[0] != j.ID {
		t.Fatalf("job %+v, backend keys %q", j, keys)
	}
}

// Jobs queued when the whole node (its embedded NATS included) dies with
// -9 are all there after it restarts on the same data, and run.
func TestAsyncJobsSurviveARestart(t *testing.T) {
	t.Parallel()
	var up atomic.Bool
	var calls sync.Map // body → times called
	b := newBackend(t, func(_ *backend, w http.ResponseWriter, r *http.Request) {
		if !up.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		body, _ := io.ReadAll(r.Body)
		n, _ := calls.LoadOrStore(string(body), new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		_, _ = io.WriteString(w, "ok")
	})
	data := t.TempDir()
	// A job waiting for its next attempt when the server died is due
	// again one ack wait after it restarts: a short one here.
	srv := startNode(t, "serve", "serve", data, "--job-ack-wait", "2s")
	srv.waitReady(t)
	putAPI(t, srv.natsURL, entry("queued", "q", "POST", "/v1/queued", httpBackend(b.URL+"/q"),
		map[string]any{"async": map[string]any{"attempts": 20, "backoff": "200ms", "max_backoff": "500ms"}}))
	waitStatus(t, srv.edge+"/v1/queued", http.StatusMethodNotAllowed)
	const jobs = 20
	locs := make([]string, jobs)
	for i := range jobs {
		locs[i] = submitJob(t, srv.edge+"/v1/queued", fmt.Sprint("job-", i), nil)
	}
	srv.kill9(t)
	up.Store(true)
	srv = startNode(t, "serve-again", "serve", data, "--job-ack-wait", "2s")
	srv.waitReady(t)
	for _, loc := range locs {
		waitJobState(t, srv.edge+loc, "succeeded", 20*time.Second, nil)
	}
	for i := range jobs {
		n, ok := calls.Load(fmt.Sprint("job-", i))
		if !ok || n.(*atomic.Int64).Load() != 1 {
			t.Fatalf("job-%d ran %v times, want once", i, n)
		}
	}
	_ = os.RemoveAll(data)
}
