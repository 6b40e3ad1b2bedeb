package otel

import (
	"context"
	"log/slog"
	"os"
	"strings"

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
// configured the standard OpenTelemetry way: the endpoint, headers,
// timeout, compression and certificates from OTEL_EXPORTER_OTLP_*, the
// batching from OTEL_BSP_SCHEDULE_DELAY, OTEL_BSP_MAX_EXPORT_BATCH_SIZE and
// OTEL_BSP_MAX_QUEUE_SIZE, the sampler from OTEL_TRACES_SAMPLER and
// OTEL_TRACES_SAMPLER_ARG (default: parent-based, always on), the service
// name from OTEL_SERVICE_NAME (default serviceName). Spans are batched
// with a bounded queue (see batcher): when the collector is slow or gone,
// spans are dropped and counted, and calls are never held up. Errors of
// the exporter and the SDK go to log (nil: slog.Default), at most one line
// per distinct error every 30 s, with the count of those suppressed.
//
// It returns nil, nil when TracingEnabled is false: callers then trace
// nothing and pay nothing.
func SetupTracing(ctx context.Context, serviceName string, log *slog.Logger) (*sdktrace.TracerProvider, error) {
	if !TracingEnabled() {
		return nil, nil
	}
	cfg, err := loadExporterConfig()
	if err != nil {
		return nil, err
	}
	installErrorLog(log, errorPeriod)
	if os.Getenv("OTEL_SERVICE_NAME") == "" {
		_ = os.Setenv("OTEL_SERVICE_NAME", serviceName) // a valid name: cannot fail
	}
	res, err := resource.New(ctx, resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithHost())
	if err != nil {
		res = resource.Default()
	}
	b := newBatcher(cfg)
	handlerMu.Lock()
	lastBatcher = b
	handlerMu.Unlock()
	return sdktrace.NewTracerProvider(
		sdktrace.WithSpanProcessor(b),
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
