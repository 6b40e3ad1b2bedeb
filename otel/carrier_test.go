package otel

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

func TestHeaderCarrierRoundTrip(t *testing.T) {
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)

	h := nats.Header{}
	prop := propagation.TraceContext{}
	prop.Inject(ctx, HeaderCarrier(h))
	if got := h.Get("Traceparent"); got != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" {
		t.Fatalf("traceparent %q", got)
	}
	out := trace.SpanContextFromContext(prop.Extract(context.Background(), HeaderCarrier(h)))
	if out.TraceID() != tid || out.SpanID() != sid || !out.IsSampled() {
		t.Fatalf("extracted %v", out)
	}
	// Lower-case names written by other clients are found too.
	lower := nats.Header{"traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
	if !trace.SpanContextFromContext(prop.Extract(context.Background(), HeaderCarrier(lower))).IsValid() {
		t.Fatal("lower-case traceparent not found")
	}
}
