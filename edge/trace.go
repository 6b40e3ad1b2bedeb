package edge

import (
	"context"
	"sync"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/otel"
)

func noop() {}

// noMsgTrace is shared by every traced request: nats.go only reads it.
var noMsgTrace = []string{bus.NoMsgTrace}

// startServer starts the edge's server span of a routed call, continuing
// the caller's traceparent. It returns the call's context and the function
// that ends the span; both cost nothing when tracing is off.
func (e *Edge) startServer(c *call) (context.Context, func()) {
	r, rt := c.r, c.rt
	if e.tracer == nil {
		return r.Context(), noop
	}
	ctx := otel.Propagator.Extract(r.Context(), otel.HeaderCarrier(r.Header))
	ctx, span := e.tracer.Start(ctx, r.Method+" "+rt.api.Route.Path, serverKind...)
	if !span.IsRecording() { // sampled out: no attributes to build, nothing to end
		return ctx, noop
	}
	return ctx, func() {
		// All attributes in one call, once the outcome is known: the SDK
		// grows the span's attribute slice on every call.
		ab := attrPool.Get().(*attrBuf)
		a := append(ab.a[:0],
			attribute.String("http.request.method", r.Method),
			attribute.String("http.route", rt.api.Route.Path),
			attribute.String("url.path", r.URL.RawPath),
			attribute.String("client.address", peerIP(r.RemoteAddr)),
			attribute.String("jetway.api", rt.api.Name),
			attribute.String("jetway.pool", rt.api.Pool),
			attribute.String("jetway.request_id", c.id),
			attribute.Int("http.response.status_code", c.status),
		)
		if c.code != "" {
			a = append(a, attribute.String("jetway.error", string(c.code)))
		}
		if c.fault != "" {
			a = append(a, attribute.String("jetway.fault", c.fault))
		}
		if c.cacheResult != "" {
			a = append(a, attribute.String("jetway.cache", c.cacheResult))
		}
		if c.app != nil {
			a = append(a, attribute.String("jetway.app", c.app.app.ID))
		}
		if c.rt.api.ForSandbox() {
			a = append(a, attribute.Bool("jetway.sandbox", true))
		}
		if c.rt.revision != "" {
			a = append(a, attribute.String("jetway.draft_revision", c.rt.revision))
		}
		if c.status >= 500 {
			span.SetStatus(codes.Error, string(c.code))
		}
		span.SetAttributes(a...)
		clear(a)
		ab.a = a[:0]
		attrPool.Put(ab)
		span.End()
	}
}

// attrBuf is a reusable attribute list: SetAttributes copies what it gets.
type attrBuf struct{ a []attribute.KeyValue }

// The span kinds as start options, made once: passing a fresh
// trace.WithSpanKind allocates on every call.
var (
	serverKind = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}
	clientKind = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}
)

var attrPool = sync.Pool{New: func() any { return &attrBuf{a: make([]attribute.KeyValue, 0, 12)} }}

// startSend starts the client span of the NATS request and puts its trace
// context in the message headers, so the worker continues the trace.
func (e *Edge) startSend(ctx context.Context, rt *route, h nats.Header) (context.Context, trace.Span) {
	if e.tracer == nil {
		return ctx, nil
	}
	ctx, span := e.tracer.Start(ctx, "send "+rt.subject, clientKind...)
	otel.Propagator.Inject(ctx, otel.HeaderCarrier(h)) // sampled or not, the worker follows the decision
	if span.SpanContext().IsSampled() {
		h[bus.HdrNatsTraceDest] = noMsgTrace
	}
	if !span.IsRecording() {
		return ctx, nil
	}
	span.SetAttributes(
		attribute.String("messaging.system", "nats"),
		attribute.String("messaging.destination.name", rt.subject),
		attribute.String("messaging.operation.type", "send"),
		attribute.String("jetway.api", rt.api.Name),
		attribute.String("jetway.pool", rt.api.Pool),
	)
	return ctx, span
}

// endSend ends the NATS request's span with its outcome.
func endSend(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
