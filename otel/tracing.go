package otel

import (
	"context"
	"errors"
	"os"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Propagator is the W3C trace context (and baggage) propagator Jetway uses
// on HTTP and NATS headers.
var Propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// TracingEnabled reports whether the environment asks for traces: an OTLP
// endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) and OTEL_SDK_DISABLED is not true.
func TracingEnabled() bool {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// SetupTracing builds a tracer provider that exports spans over OTLP/HTTP,
// configured the standard OpenTelemetry way: the endpoint, headers and
// timeouts from OTEL_EXPORTER_OTLP_*, the sampler from OTEL_TRACES_SAMPLER
// and OTEL_TRACES_SAMPLER_ARG (default: parent-based, always on), the
// service name from OTEL_SERVICE_NAME (default serviceName). Spans go
// through a batch processor with a bounded queue: when the collector is
// slow or gone, spans are dropped and calls are never held up.
//
// It returns nil, nil when TracingEnabled is false: callers then trace
// nothing and pay nothing.
func SetupTracing(ctx context.Context, serviceName string) (*sdktrace.TracerProvider, error) {
	if !TracingEnabled() {
		return nil, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, errors.Join(errors.New("creating the OTLP trace exporter"), err)
	}
	if os.Getenv("OTEL_SERVICE_NAME") == "" {
		os.Setenv("OTEL_SERVICE_NAME", serviceName)
	}
	res, err := resource.New(ctx, resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithHost())
	if err != nil {
		res = resource.Default()
	}
	return sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp, sdktrace.WithMaxQueueSize(4096)),
		sdktrace.WithResource(res),
	), nil
}

// Tracer returns the named tracer of tp, or nil when tp is nil (tracing off).
func Tracer(tp trace.TracerProvider, name string) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer(name)
}
