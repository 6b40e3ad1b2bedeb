package bench

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/bench/internal/benchsrv"
	"github.com/jetway-gw/jetway/edge"
	"github.com/jetway-gw/jetway/workers"
)

// ---------------------------------------------------------------------------
// Load shedding: an API driven at 16× its workers' capacity, with the
// edge's shedding off and on.

const (
	shedConc   = 4                     // the API's concurrency (the worker's bulkhead)
	shedDelay  = 40 * time.Millisecond // the backend's time per call
	shedFactor = 16                    // the offered load, × capacity
	shedWarm   = 2 * time.Second       // overload before measuring: the throttle's window fills
	shedRun    = 5 * time.Second       // overload measured
	// shedOutstanding caps the generator's calls in flight; a call due
	// when it is reached is not made, and counted as skipped.
	shedOutstanding = 2048
)

// shedCapacity is what the bulkhead can answer per second: shedConc
// calls of shedDelay at a time.
const shedCapacity = float64(shedConc) * float64(time.Second) / float64(shedDelay)

// slowAPI is GET /slow on a backend that takes shedDelay per call, with
// the worker's bulkhead at shedConc.
func slowAPI(base string) string {
	return fmt.Sprintf(`{"name":"bench.slow","pool":"bench","route":{"method":"GET","path":"/slow"},
	  "backend":{"type":"http","url":"%s/slow"},"timeout":"5s","concurrency":%d}`, base, shedConc)
}

// overloadResult is what one overload run measured.
type overloadResult struct {
	ok, refused, other, skipped int
	refusals, oks               []time.Duration // sorted
	shed                        int64           // refusals the edge made itself
	took                        time.Duration   // the measured part
}

// overloadRun calls u open-loop at rate per second (each call on its own
// goroutine, at most shedOutstanding at once) for warm+run, and measures
// the calls started in run.
func overloadRun(tb testing.TB, j *jetway, rate float64, warm, run time.Duration) overloadResult {
	c := benchsrv.Client()
	defer c.CloseIdleConnections()
	var (
		mu  sync.Mutex
		res overloadResult
		wg  sync.WaitGroup
	)
	sem := make(chan struct{}, shedOutstanding)
	u := j.url + "/slow"
	start := time.Now()
	measureFrom := start.Add(warm)
	var shedFrom int64 // the edge's shed count when measuring started
	measuring := false
	sent := 0
	for {
		now := time.Now()
		el := now.Sub(start)
		if el >= warm+run {
			break
		}
		if el >= warm && !measuring {
			measuring, shedFrom = true, j.edge.Shed("bench.slow")
		}
		for due := int(el.Seconds() * rate); sent < due; sent++ {
			measured := now.After(measureFrom)
			select {
			case sem <- struct{}{}:
			default:
				if measured {
					res.skipped++
				}
				continue
			}
			wg.Go(func() {
				defer func() { <-sem }()
				t0 := time.Now()
				resp, err := c.Get(u)
				code := 0
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					code = resp.StatusCode
				}
				took := time.Since(t0)
				if !measured {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				switch code {
				case http.StatusOK:
					res.ok++
					res.oks = append(res.oks, took)
				case http.StatusServiceUnavailable:
					res.refused++
					res.refusals = append(res.refusals, took)
				default:
					res.other++
				}
			})
		}
		time.Sleep(time.Millisecond)
	}
	wg.Wait()
	res.shed, res.took = j.edge.Shed("bench.slow")-shedFrom, run
	slices.Sort(res.refusals)
	slices.Sort(res.oks)
	if res.other > 0 {
		tb.Errorf("%d calls neither answered nor refused", res.other)
	}
	return res
}

func msOf(sorted []time.Duration, p float64) float64 { return pctUS(sorted, p) / 1000 }

// BenchmarkShedOverload: GET /slow (backend 40 ms, bulkhead 4 per worker:
// capacity 100 calls/s) driven open-loop at 16× capacity, on three
// in-process Jetways: the edge's shedding off, on (the defaults: K = 3,
// even pacing) and sre (the SRE book's K = 2 and random draw), one after
// the other in each iteration (the order rotates). It reports, for each, the refusals' p50
// and p99, goodput (200s per second) ÷ capacity, and the share of
// refusals the edge made itself. One iteration takes ~22 s: run it with
// -benchtime=1x (or Nx for N rounds).
func BenchmarkShedOverload(b *testing.B) {
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(shedDelay)
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	b.Cleanup(slow.Close)
	targets := []struct {
		name string
		j    *jetway
	}{
		{"off", startJetwayWith(b, edge.Options{Shedding: edge.Shedding{Off: true}}, workers.Options{}, slowAPI(slow.URL))},
		{"on", startJetwayWith(b, edge.Options{}, workers.Options{}, slowAPI(slow.URL))},
		{"sre", startJetwayWith(b, edge.Options{Shedding: edge.Shedding{K: 2, Random: true, MaxShare: 1}}, workers.Options{}, slowAPI(slow.URL))},
	}
	rate := shedFactor * shedCapacity
	sums := map[string][]overloadResult{}
	b.ResetTimer()
	for i := range b.N {
		for k := range targets {
			t := targets[(k+i)%len(targets)]
			r := overloadRun(b, t.j, rate, shedWarm, shedRun)
			sums[t.name] = append(sums[t.name], r)
			b.Logf("%-6s refusals %6d p50 %7.2f ms p99 %7.2f ms | 200s %5d p50 %6.2f ms goodput %.2f × capacity | shed at the edge %5.1f %% of refusals | skipped %d",
				t.name, r.refused, msOf(r.refusals, 0.5), msOf(r.refusals, 0.99), r.ok, msOf(r.oks, 0.5),
				float64(r.ok)/r.took.Seconds()/shedCapacity, 100*float64(r.shed)/float64(max(r.refused, 1)), r.skipped)
		}
	}
	b.StopTimer()
	for _, t := range targets {
		rs := sums[t.name]
		var refusals []time.Duration
		ok, refused, shed := 0, 0, int64(0)
		var took time.Duration
		for _, r := range rs {
			refusals = append(refusals, r.refusals...)
			ok, refused, shed, took = ok+r.ok, refused+r.refused, shed+r.shed, took+r.took
		}
		slices.Sort(refusals)
		b.ReportMetric(msOf(refusals, 0.5), t.name+"-503-p50-ms")
		b.ReportMetric(msOf(refusals, 0.99), t.name+"-503-p99-ms")
		b.ReportMetric(float64(ok)/took.Seconds()/shedCapacity, t.name+"-goodput-x")
		b.ReportMetric(float64(shed)/float64(max(refused, 1)), t.name+"-edge-shed-share")
	}
	b.ReportMetric(0, "ns/op") // an iteration is two fixed-length runs
}
