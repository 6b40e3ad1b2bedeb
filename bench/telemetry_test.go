package bench

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"syscall"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/jetway-gw/jetway/bench/internal/benchsrv"
	"github.com/jetway-gw/jetway/edge"
	"github.com/jetway-gw/jetway/otel"
	"github.com/jetway-gw/jetway/workers"
)

// discard is a span exporter that drops everything: what tracing costs
// Jetway itself, without a collector's cost.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkJetwayTelemetry measures the call path with telemetry off, with
// metrics only, and with metrics plus tracing sampled at 1 % and 100 %, in
// one run (issue 4's targets: metrics-only ≥ 0.95 and full tracing ≥ 0.8
// of the throughput with all off).
//
//	go test -run '^$' -bench JetwayTelemetry -benchtime=2s -count=3 ./bench/
func BenchmarkJetwayTelemetry(b *testing.B) {
	be := backend(b)
	tracing := func(ratio float64) *sdktrace.TracerProvider {
		tp := sdktrace.NewTracerProvider(
			sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))),
			sdktrace.WithBatcher(discard{}, sdktrace.WithMaxQueueSize(4096)))
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		return tp
	}
	for _, tc := range []struct {
		name    string
		metrics bool
		ratio   float64 // < 0: tracing off
	}{
		{"off", false, -1},
		{"metrics", true, -1},
		{"metrics+trace=0.01", true, 0.01},
		{"metrics+trace=1.0", true, 1},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var eo edge.Options
			var wo workers.Options
			if tc.metrics {
				eo.Metrics = otel.NewMetrics("bench", "edge")
			}
			if tc.ratio >= 0 {
				tp := tracing(tc.ratio)
				eo.Tracing, wo.Tracing = tp, tp
			}
			j := startJetwayWith(b, eo, wo, helloAPI(be.URL))
			runParallel(b, j.url+"/hello")
		})
	}
}

// collector is an OTLP/HTTP trace endpoint that reads and drops what it
// gets: a live collector whose own cost is as small as can be.
func collector(tb testing.TB) string {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	tb.Cleanup(s.Close)
	return s.URL
}

// deadEndpoint is a loopback URL nothing listens on (a port bound, then
// closed): every export is refused at once.
func deadEndpoint(tb testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	u := "http://" + l.Addr().String()
	l.Close()
	return u
}

// BenchmarkJetwayTracing measures what `jetway serve` pays for tracing
// every call (sampling 1.0) with the exporter of otel.SetupTracing, side
// by side: three in-process Jetways (each its own nats-server, edge,
// worker), one with tracing off, one exporting to a live OTLP/HTTP
// collector, one to a dead one (a closed port), all on the same backend.
// They serve alternate blocks of 512 calls (16 goroutines), so that a busy
// neighbour on a shared machine weighs on all three alike. For each it
// reports the process's CPU time per call (cpu-us/op: client, edge,
// nats-server, worker, backend and collector all run in the test process)
// and wall time per call; the ratios to "off" are the figures to read:
// cpu-x (CPU per call, traced / off) and thru-x (throughput, traced / off).
// b.N is the number of calls each stack serves.
//
//	go test -run '^$' -bench 'JetwayTracing$' -benchtime=20000x -count=5 ./bench/
func BenchmarkJetwayTracing(b *testing.B) {
	be := backend(b)
	live, dead := collector(b), deadEndpoint(b)
	type stack struct {
		name     string
		url      string
		cpu, run time.Duration
	}
	var stacks []*stack
	for _, tc := range []struct{ name, endpoint string }{{"off", ""}, {"live", live}, {"dead", dead}} {
		var eo edge.Options
		var wo workers.Options
		if tc.endpoint != "" {
			b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", tc.endpoint)
			tp, err := otel.SetupTracing(context.Background(), "jetway-bench", quiet)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			eo.Tracing, wo.Tracing = tp, tp
		}
		j := startJetwayWith(b, eo, wo, helloAPI(be.URL))
		stacks = append(stacks, &stack{name: tc.name, url: j.url + "/hello"})
	}
	c := benchsrv.Client()
	const block, workers = 512, 2 * parallelism
	calls := func(u string, n int) {
		var wg sync.WaitGroup
		for g := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := g; i < n; i += workers {
					if code, err := get(c, u); err != nil || code != http.StatusOK {
						b.Errorf("GET %s: %d %v", u, code, err)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	for _, s := range stacks { // warm-up: connections, pools, the exporters' first batch
		calls(s.url, 2*block)
	}
	b.ResetTimer()
	for done := 0; done < b.N; done += block {
		n := min(block, b.N-done)
		for _, s := range stacks {
			c0, t0 := rusage(), time.Now()
			calls(s.url, n)
			s.run += time.Since(t0)
			s.cpu += rusage() - c0
		}
	}
	b.StopTimer()
	off := stacks[0]
	for _, s := range stacks {
		b.ReportMetric(float64(s.cpu)/float64(time.Microsecond)/float64(b.N), s.name+"-cpu-us/op")
		if s != off {
			b.ReportMetric(float64(s.cpu)/float64(off.cpu), s.name+"-cpu-x")
			b.ReportMetric(float64(off.run)/float64(s.run), s.name+"-thru-x")
		}
	}
	b.ReportMetric(0, "ns/op") // wall time is per stack, above
}

// rusage is the process's user + system CPU time, to the microsecond.
func rusage() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
