package workers

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetway-gw/jetway/backend"
	"github.com/jetway-gw/jetway/otel"
	"github.com/jetway-gw/jetway/registry"
)

// pendingSpan is a span whose attributes are set in one call when it ends:
// the SDK grows the span's attribute slice on every SetAttributes call.
// It is pooled; endSpan puts it back.
type pendingSpan struct {
	trace.Span
	attrs []attribute.KeyValue
}

// The span kinds as start options, made once: passing a fresh
// trace.WithSpanKind allocates on every call.
var (
	serverKind = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}
	clientKind = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}
)

var spanPool = sync.Pool{New: func() any { return &pendingSpan{attrs: make([]attribute.KeyValue, 0, 12)} }}

func newPending(span trace.Span) *pendingSpan {
	p := spanPool.Get().(*pendingSpan)
	p.Span = span
	return p
}

// tracing is the middleware of the worker's span of a call: it continues
// the edge's trace, ends with the outcome the caller gets, and is nil when
// tracing is off.
func (w *Worker) tracing(a *registry.API) backend.Middleware {
	if w.tracer == nil {
		return nil
	}
	subject := a.Subject() // the subscription's: the span is named as the message's subject
	name := "process " + subject
	return func(next backend.Backend) backend.Backend {
		return func(ctx context.Context, req *backend.Request) (*backend.Response, error) {
			ctx, span := w.startProcess(ctx, req, name, subject)
			resp, err := next(ctx, req)
			switch {
			case err != nil:
				code, _ := errorCode(err)
				endSpan(span, code.Status(), err)
			case resp.Stream != nil && span != nil:
				// A relayed stream's span lasts as long as the stream.
				status := resp.Status
				resp.AfterStream(func(serr error) {
					if errors.Is(serr, errStreamCancelled) || errors.Is(serr, context.Canceled) {
						serr = nil // the caller left: no fault of the call
					}
					endSpan(span, status, serr)
				})
			default:
				endSpan(span, resp.Status, nil)
			}
			return resp, err
		}
	}
}

// startProcess starts the worker's span of a call, continuing the edge's
// trace from the message headers (which, after decodeRequest, are the
// request's HTTP headers).
func (w *Worker) startProcess(ctx context.Context, req *backend.Request, name, subject string) (context.Context, trace.Span) {
	ctx = otel.Propagator.Extract(ctx, otel.HeaderCarrier(req.Header))
	ctx, span := w.tracer.Start(ctx, name, serverKind...)
	if !span.IsRecording() {
		return ctx, nil
	}
	p := newPending(span)
	p.attrs = append(p.attrs,
		attribute.String("messaging.system", "nats"),
		attribute.String("messaging.destination.name", subject),
		attribute.String("messaging.operation.type", "process"),
		attribute.String("jetway.api", req.API.Name),
		attribute.String("jetway.pool", req.API.Pool),
		attribute.String("jetway.request_id", req.RequestID),
	)
	if req.App != "" {
		p.attrs = append(p.attrs, attribute.String("jetway.app", req.App))
	}
	if req.API.ForSandbox() {
		p.attrs = append(p.attrs, attribute.Bool("jetway.sandbox", true))
	}
	if req.API.IsDraft() {
		// A string, as the edge's span has it.
		p.attrs = append(p.attrs, attribute.String("jetway.draft_revision", strconv.FormatUint(req.API.Revision, 10)))
	}
	return ctx, p
}

// endSpan ends a span with the call's outcome (nil span: tracing off).
func endSpan(span trace.Span, status int, err error) {
	if span == nil {
		return
	}
	p, _ := span.(*pendingSpan)
	if p != nil {
		span = p.Span
	}
	if status > 0 {
		if p != nil {
			p.attrs = append(p.attrs, attribute.Int("http.response.status_code", status))
		} else {
			span.SetAttributes(attribute.Int("http.response.status_code", status))
		}
	}
	if p != nil {
		span.SetAttributes(p.attrs...)
		clear(p.attrs)
		p.attrs, p.Span = p.attrs[:0], nil
		spanPool.Put(p)
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	} else if status >= 500 {
		span.SetStatus(codes.Error, http.StatusText(status))
	}
	span.End()
}

// clientTracer gives the backend adapters the client spans of their calls
// (backend.Tracer).
type clientTracer struct{ tracer trace.Tracer }

// start starts a client span named name, puts its trace context in the
// outgoing headers, and returns it pending (nil when not recorded).
func (c *clientTracer) start(ctx context.Context, name string, h http.Header) (context.Context, *pendingSpan) {
	ctx, span := c.tracer.Start(ctx, name, clientKind...)
	otel.Propagator.Inject(ctx, otel.HeaderCarrier(h))
	if !span.IsRecording() {
		return ctx, nil
	}
	return ctx, newPending(span)
}

// StartCall starts the client span of a backend call and puts its trace
// context in the outgoing headers.
func (c *clientTracer) StartCall(ctx context.Context, method, url string, h http.Header) (context.Context, backend.Span) {
	ctx, p := c.start(ctx, method, h)
	if p == nil {
		return ctx, nil
	}
	p.attrs = append(p.attrs,
		attribute.String("http.request.method", method),
		attribute.String("url.full", url),
	)
	return ctx, p
}

// StartRPC starts the client span of an RPC backend call and puts its
// trace context in the outgoing headers.
func (c *clientTracer) StartRPC(ctx context.Context, system, service, method, target string, h http.Header) (context.Context, backend.Span) {
	name := service
	if method != "" {
		name += "/" + method
	}
	ctx, p := c.start(ctx, name, h)
	if p == nil {
		return ctx, nil
	}
	p.attrs = append(p.attrs,
		attribute.String("rpc.system", system),
		attribute.String("rpc.service", service),
	)
	// OpenTelemetry's RPC conventions: the host in server.address, the
	// port apart (a NATS subject is no host:port: it stays whole).
	addr := attribute.String("server.address", target)
	if host, port, err := net.SplitHostPort(target); err == nil {
		if n, err := strconv.Atoi(port); err == nil {
			addr = attribute.String("server.address", host)
			p.attrs = append(p.attrs, attribute.Int("server.port", n))
		}
	}
	p.attrs = append(p.attrs, addr)
	if method != "" {
		p.attrs = append(p.attrs, attribute.String("rpc.method", method))
	}
	return ctx, p
}

// RPCCode records the call's gRPC status code (backend.Span).
func (p *pendingSpan) RPCCode(code int) {
	p.attrs = append(p.attrs, attribute.Int("rpc.grpc.status_code", code))
}

// Finish ends a client span (backend.Span).
func (p *pendingSpan) Finish(status int, err error) { endSpan(p, status, err) }
