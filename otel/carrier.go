package otel

import (
	"net/textproto"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
)

// HeaderCarrier adapts nats.Header (and http.Header, the same map type:
// HeaderCarrier(h)) to propagation.TextMapCarrier. NATS
// headers are case-sensitive; Jetway writes header names in their canonical
// HTTP form (Traceparent), and Get also finds the lower-case form that other
// NATS clients write.
type HeaderCarrier nats.Header

var _ propagation.TextMapCarrier = HeaderCarrier(nil)

// canonicalKey is textproto.CanonicalMIMEHeaderKey without its allocation
// for the propagators' own keys, which they ask for on every call.
func canonicalKey(key string) string {
	switch key {
	case "traceparent":
		return "Traceparent"
	case "tracestate":
		return "Tracestate"
	case "baggage":
		return "Baggage"
	}
	return textproto.CanonicalMIMEHeaderKey(key)
}

// Get returns the first value of key.
func (c HeaderCarrier) Get(key string) string {
	if v := c[canonicalKey(key)]; len(v) > 0 {
		return v[0]
	}
	if v := c[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set sets key to value, under its canonical name.
func (c HeaderCarrier) Set(key, value string) {
	c[canonicalKey(key)] = []string{value}
}

// Keys lists the header names.
func (c HeaderCarrier) Keys() []string {
	out := make([]string, 0, len(c))
	for k := range c {
		out = append(out, k)
	}
	return out
}
