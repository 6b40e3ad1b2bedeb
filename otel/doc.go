// Package otel is Jetway's telemetry: call metrics, per-second records,
// alert evaluation and the OpenTelemetry tracing setup. HeaderCarrier lets
// the standard W3C propagators read and write trace context in NATS message
// headers, so one trace can span edge → NATS → worker → backend.
//
// Start with Metrics (metrics.go): every routed call is recorded by how its
// caller saw it end, into counters and latency histograms (histogram.go)
// served as Prometheus text, and into one Record per API per second that
// the nodes publish on NATS and answer queries for (query.go). Alerts
// (alerts.go) judges the alert rules from those records and from breaker
// and channel events (channels.go: calls by channel, channel states).
// SetupTracing (tracing.go) builds the tracer provider from the standard
// OTEL_* variables; the OTLP/HTTP exporter is Jetway's own
// (exporter.go, otlpwire.go), with bounded queues and rate-limited error
// logs (errlog.go), so a slow or absent collector never holds up a call.
package otel
