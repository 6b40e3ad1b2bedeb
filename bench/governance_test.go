package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/bench/internal/benchsrv"
	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/edge"
	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/workers"
)

// ---------------------------------------------------------------------------
// Rate limits: what the edge's limiter costs per request.

// hugeLimit never refuses: the limiter code runs on every call, and every
// call passes.
const hugeLimit = 1 << 30

// limitRules are two rules that run on every call and never refuse: one
// for the whole API, one keyed by the X-Region header (a Keyed limiter:
// key built from the request, map lookup, LRU move).
var limitRules = fmt.Sprintf(`[{"name":"api","limit":%d,"window":"1s"},
  {"name":"per-region","key":["header:X-Region"],"limit":%d,"window":"1s"}]`, hugeLimit, hugeLimit)

// limitedAPI is helloAPI at GET /limited, with rules (JSON) if not empty.
func limitedAPI(base, rules string) string {
	doc := `{"name":"bench.limited","pool":"bench","route":{"method":"GET","path":"/limited"},
	  "backend":{"type":"http","url":"` + base + `/hello"},"timeout":"5s","concurrency":4096`
	if rules != "" {
		doc += `,"rate_limits":` + rules
	}
	return doc + `}`
}

// regions are the X-Region values the clients send, one per goroutine in
// turn: the keyed rule tracks several keys, as it would in production.
var regions = []string{"eu-west", "eu-north", "us-east", "us-west", "ap-south", "ap-east", "sa-east", "af-south"}

// cpuTime is the CPU time (user + system) this process has used, from
// /proc/self/stat (Linux; 0 elsewhere). Everything in these benchmarks —
// clients, edge, NATS server, worker, backend — runs in this process, and
// its CPU time is less noisy than wall time on a shared machine.
func cpuTime() time.Duration {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0
	}
	// The fields after the command name, which is in parentheses and may
	// hold spaces: state is field 3 of the line, utime 14 and stime 15.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 > len(b) {
		return 0
	}
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 13 {
		return 0
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(ut+st) * (time.Second / 100) // USER_HZ is 100 on Linux
}

// runParallelHeader is runParallel with an X-Region header on every call
// (one region per goroutine, in turn); it also reports the process's CPU
// time per request (cpu-us/op).
func runParallelHeader(b *testing.B, u string) {
	c := benchsrv.Client()
	req := func(region string) *http.Request {
		r, err := http.NewRequest(http.MethodGet, u, nil)
		if err != nil {
			b.Fatal(err)
		}
		r.Header.Set("X-Region", region)
		return r
	}
	do := func(r *http.Request) (int, error) {
		resp, err := c.Do(r)
		if err != nil {
			return 0, err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, err
	}
	if code, err := do(req(regions[0])); err != nil || code != http.StatusOK {
		b.Fatalf("GET %s before the run: %d %v", u, code, err)
	}
	var next atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(parallelism)
	b.ResetTimer()
	cpu0 := cpuTime()
	b.RunParallel(func(pb *testing.PB) {
		region := regions[int(next.Add(1))%len(regions)]
		for pb.Next() {
			if code, err := do(req(region)); err != nil || code != http.StatusOK {
				b.Errorf("GET %s: %d %v", u, code, err)
				return
			}
		}
	})
	cpu1 := cpuTime()
	b.StopTimer()
	if cpu0 > 0 {
		b.ReportMetric(float64(cpu1-cpu0)/float64(time.Microsecond)/float64(b.N), "cpu-us/op")
	}
	c.CloseIdleConnections()
}

// rulesName names a sub-benchmark by its number of rules.
func rulesName(rules string) string {
	if rules == "" {
		return "rules=0"
	}
	return "rules=2"
}

// BenchmarkJetwayRateLimited is BenchmarkJetway (GET /hello through edge,
// NATS and worker to the bench backend) with an X-Region header on every
// call, without ("rules=0") and with ("rules=2") limitRules on the API. The
// difference is the limiter's cost per request; BenchmarkJetway in the
// same run shows what the header alone adds:
//
//	go test -run '^$' -bench 'Jetway$|JetwayRateLimited' -benchtime=2s -count=6 -benchmem ./bench/
func BenchmarkJetwayRateLimited(b *testing.B) {
	for _, rules := range []string{"", limitRules} {
		b.Run(rulesName(rules), func(b *testing.B) {
			be := backend(b)
			j := startJetway(b, limitedAPI(be.URL, rules))
			runParallelHeader(b, j.url+"/limited")
		})
	}
}

// degradedEdge is an edge, with no worker, that routes GET /edge to an API
// with rules whose degrade switch is on: the edge runs the API's rate
// limits, then answers 200 {"ok":true} from the switch itself.
func degradedEdge(b *testing.B, rules string) *edge.Edge {
	doc := `{"name":"bench.edge","pool":"bench","route":{"method":"GET","path":"/edge"},"backend":{"type":"mock","status":200}`
	if rules != "" {
		doc += `,"rate_limits":` + rules
	}
	a, err := registry.ParseAPI("", []byte(doc+`}`))
	if err != nil {
		b.Fatal(err)
	}
	e, err := edge.New(edge.Options{Conn: natstest.Connect(b, natstest.RunServer(b)), Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	body := `{"ok":true}`
	e.Apply(&registry.Snapshot{
		APIs:    map[string]*registry.API{a.Name: a},
		Degrade: map[string]*registry.Degrade{a.Name: {On: true, API: a.Name, Static: registry.Static{Status: 200, Body: &body}}},
	})
	w := httptest.NewRecorder()
	e.ServeHTTP(w, edgeRequest())
	if w.Code != http.StatusOK || w.Body.String() != body {
		b.Fatalf("edge answered %d %q, want the switch's 200 %q", w.Code, w.Body, body)
	}
	return e
}

func edgeRequest() *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/edge", nil)
	r.Header.Set("X-Region", "eu-west")
	return r
}

// BenchmarkEdgeRateLimit measures the edge's own handling of a request, in
// one goroutine and without the network, on two edges: one whose API has
// no rule and one whose API has limitRules. Each API's degrade switch is
// on, so the edge answers itself right after the rate limits (which run
// before the switch). The two edges serve alternate blocks of 256
// requests, so that drift and other load on the machine hit both alike.
// Each op is one request on each edge; base-ns and rules-ns are the time
// per request of each, limiter-ns their difference: the CPU the two rules
// add to a request.
func BenchmarkEdgeRateLimit(b *testing.B) {
	base, limited := degradedEdge(b, ""), degradedEdge(b, limitRules)
	req := edgeRequest()
	same := func() *http.Request { return req }
	compareHandlers(b, base, same, limited, same, "base-ns", "rules-ns", "limiter-ns")
}

// compareHandlers serves b.N requests on each of two handlers, in
// alternating blocks of 256 so that drift and other load on the machine hit
// both alike, and reports each one's time per request and their difference
// under the three metric names.
func compareHandlers(b *testing.B, base http.Handler, baseReq func() *http.Request, other http.Handler, otherReq func() *http.Request, baseName, otherName, diffName string) {
	const block = 256
	var tBase, tOther time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += block {
		n := min(block, b.N-done)
		t0 := time.Now()
		for range n {
			base.ServeHTTP(httptest.NewRecorder(), baseReq())
		}
		t1 := time.Now()
		for range n {
			other.ServeHTTP(httptest.NewRecorder(), otherReq())
		}
		tOther += time.Since(t1)
		tBase += t1.Sub(t0)
	}
	b.StopTimer()
	b.ReportMetric(float64(tBase)/float64(b.N), baseName)
	b.ReportMetric(float64(tOther)/float64(b.N), otherName)
	b.ReportMetric(float64(tOther-tBase)/float64(b.N), diffName)
}

// ---------------------------------------------------------------------------
// Bulkheads: API B's latency while API A's backend hangs.

const (
	bulkTimeoutA = time.Second // A's timeout: how long a hung call holds its slot
	bulkCapA     = 16          // A's concurrency (worker) and edge_concurrency
	bulkLoadersA = 32          // goroutines hammering A during the fault
	bulkCallersB = 4           // goroutines calling B, each call after the last
	// bulkBackoff is how long an A caller refused with 503 waits before its
	// next call, as a client backing off would. Without it, 16 goroutines
	// spin on the edge's cheap refusal and take a core of a 2-core machine.
	bulkBackoff = 5 * time.Millisecond
)

// bulkhead is an in-process Jetway with two pools: one edge, worker A
// serving pool bulk-a only, worker B serving pool bulk-b only, each on its
// own NATS connection. API A (GET /a) has a backend that holds every call
// until the benchmark ends; API B (GET /b) is the bench backend's /hello.
type bulkhead struct {
	url     string
	holding atomic.Int64 // calls A's backend holds right now
}

func startBulkhead(tb testing.TB) *bulkhead {
	tb.Helper()
	bh := &bulkhead{}
	released := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bh.holding.Add(1)
		defer bh.holding.Add(-1)
		select {
		case <-released:
		case <-r.Context().Done():
		}
	}))
	tb.Cleanup(hung.Close)
	tb.Cleanup(func() { close(released) }) // before hung.Close
	be := backend(tb)

	ns := natstest.RunServer(tb)
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	e, err := edge.New(edge.Options{Conn: natstest.Connect(tb, ns), Logger: quiet})
	if err != nil {
		tb.Fatal(err)
	}
	wa, err := workers.New(workers.Options{Conn: natstest.Connect(tb, ns), Pools: []string{"bulk-a"}, Logger: quiet})
	if err != nil {
		tb.Fatal(err)
	}
	wb, err := workers.New(workers.Options{Conn: natstest.Connect(tb, ns), Pools: []string{"bulk-b"}, Logger: quiet})
	if err != nil {
		tb.Fatal(err)
	}
	ctl := natstest.Connect(tb, ns)
	watcher := registry.NewWatcher(registry.WatcherOptions{Conn: ctl, Logger: quiet})
	watcher.OnChange(e.Apply)
	watcher.OnChange(wa.Apply)
	watcher.OnChange(wb.Apply)
	go func() { _ = watcher.Run(ctx) }()
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if err := watcher.WaitLive(wctx); err != nil {
		tb.Fatal(err)
	}
	rc, err := registry.NewClient(wctx, ctl, registry.BucketOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	for _, d := range []string{
		fmt.Sprintf(`{"name":"bulk.a","pool":"bulk-a","route":{"method":"GET","path":"/a"},
		  "backend":{"type":"http","url":"%s/hang"},"timeout":"%s","concurrency":%d,"edge_concurrency":%d}`,
			hung.URL, bulkTimeoutA, bulkCapA, bulkCapA),
		`{"name":"bulk.b","pool":"bulk-b","route":{"method":"GET","path":"/b"},
		  "backend":{"type":"http","url":"` + be.URL + `/hello"},"timeout":"5s","concurrency":4096}`,
	} {
		if _, err := rc.Put(wctx, []byte(d)); err != nil {
			tb.Fatalf("publishing %s: %v", d, err)
		}
	}
	srv := httptest.NewUnstartedServer(e)
	srv.Config.ReadHeaderTimeout = 10 * time.Second
	srv.Start()
	tb.Cleanup(srv.Close)
	bh.url = srv.URL
	natstest.CheckFor(tb, 10*time.Second, time.Millisecond, func() error {
		if n := e.Routes(); n < 2 {
			return fmt.Errorf("edge routes %d of 2 apis", n)
		}
		if s := wa.Subscribed(); !slices.Equal(s, []string{"bulk.a"}) {
			return fmt.Errorf("worker A serves %v, want [bulk.a]", s)
		}
		if s := wb.Subscribed(); !slices.Equal(s, []string{"bulk.b"}) {
			return fmt.Errorf("worker B serves %v, want [bulk.b]", s)
		}
		return nil
	})
	// A worker lists an API as served once it has asked NATS for the
	// subscription, which may reach the server a little later: until both
	// APIs answer, a call can still get 503 NO_WORKERS.
	c := benchsrv.Client()
	defer c.CloseIdleConnections()
	natstest.CheckFor(tb, 10*time.Second, time.Millisecond, func() error {
		if code, err := get(c, bh.url+"/b"); err != nil || code != http.StatusOK {
			return fmt.Errorf("GET /b: %d %v", code, err)
		}
		req, _ := http.NewRequest(http.MethodGet, bh.url+"/a", nil)
		req.Header.Set("X-Request-Timeout", "20ms")
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusGatewayTimeout {
			return fmt.Errorf("GET /a with a 20ms deadline: %d, want 504", resp.StatusCode)
		}
		return nil
	})
	return bh
}

// fault hammers A from bulkLoadersA goroutines until stop is called, and
// returns once A's backend holds a full pool of calls. stop waits for the
// loaders and returns their outcomes by status, and how many calls of A
// were made per second.
func (bh *bulkhead) fault(tb testing.TB) (stop func() (map[int]int, float64)) {
	tb.Helper()
	c := benchsrv.Client()
	started := time.Now()
	done := make(chan struct{})
	var wg sync.WaitGroup
	counts := make([]map[int]int, bulkLoadersA)
	for i := range bulkLoadersA {
		counts[i] = map[int]int{}
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				code, err := get(c, bh.url+"/a")
				if err != nil {
					code = -1
				}
				counts[i][code]++
				if code != http.StatusGatewayTimeout {
					time.Sleep(bulkBackoff)
				}
			}
		})
	}
	natstest.CheckFor(tb, 10*time.Second, time.Millisecond, func() error {
		if n := bh.holding.Load(); n < bulkCapA {
			return fmt.Errorf("A's backend holds %d calls, want %d", n, bulkCapA)
		}
		return nil
	})
	return func() (map[int]int, float64) {
		close(done)
		wg.Wait()
		took := time.Since(started)
		c.CloseIdleConnections()
		all, n := map[int]int{}, 0
		for _, m := range counts {
			for k, v := range m {
				all[k] += v
				n += v
			}
		}
		return all, float64(n) / took.Seconds()
	}
}

// latenciesB calls B n times in all from bulkCallersB goroutines, each call
// after the previous one, and returns the sorted latencies; any answer but
// 200 is a failed bulkhead.
func (bh *bulkhead) latenciesB(tb testing.TB, c *http.Client, n int) []time.Duration {
	var next atomic.Int64
	lat := make([][]time.Duration, bulkCallersB)
	var wg sync.WaitGroup
	for i := range bulkCallersB {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				start := time.Now()
				resp, err := c.Get(bh.url + "/b")
				if err != nil {
					tb.Errorf("GET /b: %v", err)
					return
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				lat[i] = append(lat[i], time.Since(start))
				if err != nil || resp.StatusCode != http.StatusOK {
					tb.Errorf("GET /b: %d %s %v", resp.StatusCode, body, err)
					return
				}
			}
		})
	}
	wg.Wait()
	all := slices.Concat(lat...)
	slices.Sort(all)
	return all
}

func pctUS(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return float64(sorted[int(p*float64(len(sorted)-1))]) / float64(time.Microsecond)
}

func runBulkhead(b *testing.B, withFault bool) {
	bh := startBulkhead(b)
	c := benchsrv.Client()
	defer c.CloseIdleConnections()
	var stop func() (map[int]int, float64)
	if withFault {
		stop = bh.fault(b)
	}
	bh.latenciesB(b, c, 200) // warm-up: connections, goroutine stacks
	b.ResetTimer()
	lat := bh.latenciesB(b, c, b.N)
	b.StopTimer()
	if withFault {
		outcomes, rate := stop()
		b.ReportMetric(rate, "a-calls/s")
		if outcomes[http.StatusGatewayTimeout] == 0 && bh.holding.Load() < bulkCapA {
			b.Fatalf("A's calls %v: the fault did not hold", outcomes)
		}
		for code := range outcomes {
			if code != http.StatusGatewayTimeout && code != http.StatusServiceUnavailable {
				b.Errorf("A's calls %v: want only 504 and 503", outcomes)
			}
		}
	}
	b.ReportMetric(pctUS(lat, 0.50), "p50-us")
	b.ReportMetric(pctUS(lat, 0.99), "p99-us")
}

// BenchmarkBulkheadBaseline: p50 and p99 latency of API B (pool bulk-b)
// called by 4 goroutines, each call after the last, while API A (pool
// bulk-a, its own worker) is idle. Use a fixed count, e.g. -benchtime=4000x.
func BenchmarkBulkheadBaseline(b *testing.B) { runBulkhead(b, false) }

// BenchmarkBulkheadFault: the same while A's backend hangs and 32
// goroutines hammer A: 16 calls are held until A's 1 s timeout (504), the
// rest are refused by A's edge_concurrency of 16 (503) and back off 5 ms.
// The target: p99 ≤ 1.2 × BenchmarkBulkheadBaseline's.
func BenchmarkBulkheadFault(b *testing.B) { runBulkhead(b, true) }

// TestGovernanceTargets checks, quickly, that the governance benchmarks
// measure what they claim: the rate-limited API answers the backend's body,
// and in the bulkhead setup B answers while A, called with a 100 ms
// deadline, times out.
func TestGovernanceTargets(t *testing.T) {
	be := backend(t)
	j := startJetway(t, limitedAPI(be.URL, limitRules))
	c := benchsrv.Client()
	defer c.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodGet, j.url+"/limited", nil)
	req.Header.Set("X-Region", "eu-west")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != string(benchsrv.Hello) {
		t.Errorf("rate-limited api: %d %q", resp.StatusCode, body)
	}

	bh := startBulkhead(t)
	if code, err := get(c, bh.url+"/b"); err != nil || code != http.StatusOK {
		t.Errorf("GET /b: %d %v", code, err)
	}
	req, _ = http.NewRequest(http.MethodGet, bh.url+"/a", nil)
	req.Header.Set("X-Request-Timeout", "100ms")
	start := time.Now()
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusGatewayTimeout || time.Since(start) > 2*time.Second {
		t.Errorf("GET /a with a 100ms deadline: %d %q after %v, want 504 at once", resp.StatusCode, body, time.Since(start))
	}
}
