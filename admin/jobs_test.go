package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/admin"
	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/internal/jetwaytest"
	"github.com/jetway-gw/jetway/registry"
)

// Async jobs and dead letters over REST, on real ones: a gateway's worker
// runs jobs whose backend fails, so they land in jetway_dlq. A viewer
// reads the queues and the records, an operator a job's status, a
// record's request and its replay (the same job, which then succeeds),
// an admin purges; each write is in the audit trail under its token.
func TestJobsAndDeadLettersOverREST(t *testing.T) {
	var failing atomic.Bool
	failing.Store(true)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if failing.Load() {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		_, _ = fmt.Fprintf(w, "done %s", body)
	}))
	t.Cleanup(backend.Close)
	g := jetwaytest.Start(t, "p")
	srv := httptest.NewServer(admin.New(admin.Options{Client: g.Client, Bootstrap: boot, Conn: g.Conn}).Handler())
	t.Cleanup(srv.Close)
	e := &env{t: t, url: srv.URL, c: g.Client, nc: g.Conn}
	viewer, op := e.token("viewer"), e.token("operator")

	async := func(name, pool, extra string) string {
		return fmt.Sprintf(`{"name":%q,"pool":%q,"route":{"method":"POST","path":"/%s"},"backend":{"type":"http","url":%q},"async":{"attempts":1}%s}`,
			name, pool, strings.ReplaceAll(name, ".", "/"), backend.URL, extra)
	}
	g.Publish(async("jobs.fail", "p", `,"auth":{"methods":["key"]}`))
	g.Publish(async("jobs.other", "p", ""))
	g.Publish(async("jobs.idle", "nobody", "")) // no worker serves its pool: its jobs wait
	key := g.PutKeyedApp("shop", "jobs.*")
	submit := func(path, body string, hdr ...string) string {
		t.Helper()
		var loc string
		natstest.CheckFor(t, 5*time.Second, 20*time.Millisecond, func() error { // the app reaches the edge
			r := g.Do("POST", path, strings.NewReader(body), append([]string{"Prefer", "respond-async"}, hdr...)...)
			if r.Status != http.StatusAccepted {
				return fmt.Errorf("submit %s: %d %s", path, r.Status, r.Body)
			}
			loc = r.Header.Get("Location")
			return nil
		})
		return strings.TrimPrefix(loc, "/_jetway/jobs/")
	}
	job := submit("/jobs/fail", "payload", "X-Api-Key", key)
	other := submit("/jobs/other", "x")
	submit("/jobs/idle", "later")

	type record struct {
		registry.DeadLetter
		Body *string `json:"body"`
	}
	list := func(token, query string) []record {
		t.Helper()
		r := e.do(token, "GET", "/v1/deadletters"+query, "")
		var v struct{ Items []record }
		if r.status != 200 || json.Unmarshal([]byte(r.body), &v) != nil {
			t.Fatalf("list%s: %d %s", query, r.status, r.body)
		}
		return v.Items
	}
	var dead record
	natstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		items := list(viewer, "")
		if len(items) != 2 {
			return fmt.Errorf("%d dead letters, want 2", len(items))
		}
		for _, d := range items {
			if d.Job == job {
				dead = d
			}
		}
		return nil
	})
	if dead.Seq == 0 || dead.API != "jobs.fail" || dead.App != "shop" || dead.Reason != registry.ReasonExhausted || dead.Attempts != 1 ||
		!strings.Contains(dead.Error, "503") || dead.Path != "/jobs/fail" || dead.Body != nil {
		t.Fatalf("the record: %+v", dead)
	}
	if items := list(viewer, "?api=jobs.other"); len(items) != 1 || items[0].Job != other {
		t.Errorf("?api=jobs.other: %+v", items)
	}
	all := list(viewer, "")
	if items := list(viewer, "?limit=1"); len(items) != 1 || items[0].Seq != all[1].Seq || all[0].Seq >= all[1].Seq {
		t.Errorf("?limit=1 (the newest): %+v of %+v", items, all)
	}
	for _, q := range []string{"?api=a%20b", "?limit=0", "?limit=many", "?limit=10001"} {
		if r := e.do(viewer, "GET", "/v1/deadletters"+q, ""); r.status != 400 || r.err.Code != "BAD_REQUEST" {
			t.Errorf("list%s: %d %s", q, r.status, r.body)
		}
	}

	// The queues: the dead letters of each API, the job waiting for a
	// worker with its age.
	r := e.do(viewer, "GET", "/v1/jobs/queues", "")
	var queues struct{ Items []admin.JobQueueItem }
	if r.status != 200 || json.Unmarshal([]byte(r.body), &queues) != nil {
		t.Fatalf("queues: %d %s", r.status, r.body)
	}
	byAPI := map[string]admin.JobQueueItem{}
	for _, q := range queues.Items {
		byAPI[q.API] = q
	}
	if q := byAPI["jobs.fail"]; q.DeadLetters != 1 || q.Queued != 0 || q.Oldest != nil {
		t.Errorf("jobs.fail's queue: %+v", q)
	}
	if q := byAPI["jobs.idle"]; q.Queued != 1 || q.Oldest == nil || q.OldestAge < 0 || q.OldestAge > 60 || q.DeadLetters != 0 {
		t.Errorf("jobs.idle's queue: %+v (%s)", q, r.body)
	}

	// A job's status: any app's, an operator's to read.
	if r := e.do(viewer, "GET", "/v1/jobs/"+job, ""); r.status != 403 || r.err.Code != "FORBIDDEN" {
		t.Errorf("a viewer reads a job: %d %s", r.status, r.body)
	}
	var st registry.JobStatus
	if r := e.do(op, "GET", "/v1/jobs/"+job, ""); r.status != 200 || json.Unmarshal([]byte(r.body), &st) != nil ||
		st.ID != job || st.App != "shop" || st.State != registry.JobFailed || st.Result == nil || st.Result.Status != 503 {
		t.Fatalf("a job's status: %d %s", r.status, r.body)
	}
	for _, id := range []string{"nope", strings.Repeat("a", 26), strings.ToUpper(job)} {
		if r := e.do(op, "GET", "/v1/jobs/"+id, ""); r.status != 404 || r.err.Code != "NOT_FOUND" || r.header.Get("Content-Type") != "application/json" {
			t.Errorf("job %s: %d %s", id, r.status, r.body)
		}
	}

	// One record with its request's body.
	seq := strconv.FormatUint(dead.Seq, 10)
	if r := e.do(viewer, "GET", "/v1/deadletters/"+seq, ""); r.status != 403 {
		t.Errorf("a viewer reads a request: %d %s", r.status, r.body)
	}
	var shown record
	if r := e.do(op, "GET", "/v1/deadletters/"+seq, ""); r.status != 200 || json.Unmarshal([]byte(r.body), &shown) != nil ||
		shown.Body == nil || *shown.Body != "payload" || shown.Job != job || shown.Size != len("payload") {
		t.Errorf("show: %d %s", r.status, r.body)
	}
	for seq, want := range map[string]int{"0": 400, "x": 400, "-1": 400, "999999": 404} {
		if r := e.do(op, "GET", "/v1/deadletters/"+seq, ""); r.status != want || r.err.Code == "" {
			t.Errorf("show %s: %d %s, want %d", seq, r.status, r.body, want)
		}
		if r := e.do(op, "POST", "/v1/deadletters/"+seq+"/replay", ""); r.status != want || r.err.Code == "" {
			t.Errorf("replay %s: %d %s, want %d", seq, r.status, r.body, want)
		}
	}

	// A replay: an operator's, the same job again, which now succeeds.
	if r := e.do(viewer, "POST", "/v1/deadletters/"+seq+"/replay", ""); r.status != 403 {
		t.Errorf("a viewer replays: %d %s", r.status, r.body)
	}
	failing.Store(false)
	var rep admin.Replayed
	if r := e.do(op, "POST", "/v1/deadletters/"+seq+"/replay", ""); r.status != 200 || json.Unmarshal([]byte(r.body), &rep) != nil ||
		rep.Job != job || rep.Location != "/_jetway/jobs/"+job || rep.DeadLetter.Seq != dead.Seq {
		t.Fatalf("replay: %d %s", r.status, r.body)
	}
	natstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		r := e.do(op, "GET", "/v1/jobs/"+job, "")
		if err := json.Unmarshal([]byte(r.body), &st); err != nil || st.State != registry.JobSucceeded {
			return fmt.Errorf("the replayed job: %d %s", r.status, r.body)
		}
		return nil
	})
	if st.Result == nil || st.Result.Body == nil || *st.Result.Body != "done payload" || st.Attempts != 1 {
		t.Errorf("the replayed job: %+v", st)
	}
	if r := e.do(op, "POST", "/v1/deadletters/"+seq+"/replay", ""); r.status != 404 {
		t.Errorf("a replay of a record gone: %d %s", r.status, r.body)
	}
	if items := list(viewer, "?api=jobs.fail"); len(items) != 0 {
		t.Errorf("jobs.fail's dead letters after the replay: %+v", items)
	}

	// A record whose job has not ended (replayed already, its record
	// kept) is a conflict, and sends nothing.
	pending := registry.NewJobID("p")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := jetstream.New(g.Conn)
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := registry.NewJobStore(g.Conn)
	if err != nil {
		t.Fatal(err)
	}
	if err := jobs.Create(ctx, &registry.JobStatus{ID: pending, API: "jobs.other", Tier: bus.TierAPI, Pool: "p", State: registry.JobPending}, time.Hour); err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(bus.DeadLetterSubject("p", bus.TierAPI, "jobs.other"))
	m.Header.Set(bus.HdrJobID, pending)
	m.Header.Set(registry.HdrDeadReason, registry.ReasonExhausted)
	m.Data = []byte("x")
	ack, err := js.PublishMsg(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	if r := e.do(op, "POST", "/v1/deadletters/"+strconv.FormatUint(ack.Sequence, 10)+"/replay", ""); r.status != 409 || r.err.Code != "CONFLICT" || !strings.Contains(r.body, "pending") {
		t.Errorf("a replay of a job not ended: %d %s", r.status, r.body)
	}

	// A purge: an admin's, of one API or all.
	if r := e.do(op, "DELETE", "/v1/deadletters", ""); r.status != 403 {
		t.Errorf("an operator purges: %d %s", r.status, r.body)
	}
	if r := e.do(boot, "DELETE", "/v1/deadletters?api=a%20b", ""); r.status != 400 {
		t.Errorf("a purge of a bad name: %d %s", r.status, r.body)
	}
	if r := e.do(boot, "DELETE", "/v1/deadletters?api=jobs.fail", ""); r.status != 200 || !strings.Contains(r.body, `"removed":`) {
		t.Errorf("a purge of jobs.fail: %d %s", r.status, r.body)
	}
	if items := list(viewer, "?api=jobs.other"); len(items) != 2 {
		t.Errorf("jobs.other's dead letters after a purge of jobs.fail's: %+v", items)
	}
	admin2 := e.token("admin")
	if r := e.do(admin2, "DELETE", "/v1/deadletters?api=jobs.other", ""); r.status != 200 || strings.TrimSpace(r.body) != `{"removed":2}` {
		t.Errorf("a purge of jobs.other: %d %s", r.status, r.body)
	}
	if items := list(viewer, ""); len(items) != 0 {
		t.Errorf("after the purges: %+v", items)
	}
	if r := e.do(boot, "DELETE", "/v1/deadletters", ""); r.status != 200 || strings.TrimSpace(r.body) != `{"removed":0}` {
		t.Errorf("a purge of all: %d %s", r.status, r.body)
	}

	// The trail names each write's token.
	r = e.do(viewer, "GET", "/v1/audit?kind=dlq", "")
	var trail struct{ Items []registry.Change }
	if r.status != 200 || json.Unmarshal([]byte(r.body), &trail) != nil {
		t.Fatalf("audit: %d %s", r.status, r.body)
	}
	var got []string
	for _, c := range trail.Items {
		got = append(got, c.Action+" "+c.Key+" "+strings.SplitN(c.Actor, "/", 2)[0])
	}
	want := []string{"replay jobs.fail/" + job + " token:operator-1", "purge jobs.fail bootstrap-token", "purge jobs.other token:admin-1", "purge * bootstrap-token"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("the trail:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
