package bench

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

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
