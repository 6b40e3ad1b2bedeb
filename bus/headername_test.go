package bus_test

import (
	"context"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/bus/natstest"
)

func TestHeaderNameEncoding(t *testing.T) {
	for _, tc := range []struct{ name, wire string }{
		{"Content-Type", "Content-Type"},
		{"X-Request-Id", "X-Request-Id"},
		{"X-Jetway-App", "X-Jetway-App"},
		{"Traceparent", "Traceparent"}, // W3C trace context, meant for NATS to see
		{"Statuses", "Statuses"},
		{"X-Status", "X-Status"},
		{"Nats", "Nats"},
		{"Status", "Jetway-H-Status"},
		{"status", "Jetway-H-status"},
		{"STATUS", "Jetway-H-STATUS"},
		{"Description", "Jetway-H-Description"},
		{"Nats-Msg-Id", "Jetway-H-Nats-Msg-Id"},
		{"Nats-Expected-Stream", "Jetway-H-Nats-Expected-Stream"},
		{"nats-trace-dest", "Jetway-H-nats-trace-dest"},
		{"Nats-", "Jetway-H-Nats-"},
		{"Nmqtt-Pub", "Jetway-H-Nmqtt-Pub"},
		{"Kv-Operation", "Jetway-H-Kv-Operation"},
		{"Jetway-Status", "Jetway-H-Jetway-Status"},
		{"jetway-method", "Jetway-H-jetway-method"},
		{"Jetway-H-Status", "Jetway-H-Jetway-H-Status"},
		{"Jetway-H-", "Jetway-H-Jetway-H-"},
	} {
		if got := bus.EncodeHeaderName(tc.name); got != tc.wire {
			t.Errorf("EncodeHeaderName(%q) = %q, want %q", tc.name, got, tc.wire)
		}
		if got, ok := bus.DecodeHeaderName(tc.wire); !ok || got != tc.name {
			t.Errorf("DecodeHeaderName(%q) = %q, %v, want %q", tc.wire, got, ok, tc.name)
		}
	}
	// Names that carry no HTTP header: the wire's, the protocol's, and
	// escapes EncodeHeaderName never writes.
	for _, wire := range []string{
		bus.HdrStatus, bus.HdrMethod, bus.HdrError, "jetway-status",
		"Status", "Description", "Nats-Request-Info", "Nats-Trace-Dest", "KV-Operation",
		"Jetway-H-", "Jetway-H-Content-Type", "jetway-h-Status", "Jetway-h-Status",
	} {
		if got, ok := bus.DecodeHeaderName(wire); ok {
			t.Errorf("DecodeHeaderName(%q) = %q, true: carries no HTTP header", wire, got)
		}
	}
}

func TestHTTPHeadersEncodeInPlace(t *testing.T) {
	h := map[string][]string{
		"Content-Type":    {"text/plain"},
		"Status":          {"503"},
		"Jetway-H-Status": {"not the same header"},
		"Description":     {"x"},
		"Nats-Msg-Id":     {"1", "2"},
		"X-Other":         {"y"},
	}
	want := maps.Clone(h)
	bus.EncodeHTTPHeaders(h)
	wire := slices.Sorted(maps.Keys(h))
	if exp := []string{"Content-Type", "Jetway-H-Description", "Jetway-H-Jetway-H-Status", "Jetway-H-Nats-Msg-Id", "Jetway-H-Status", "X-Other"}; !reflect.DeepEqual(wire, exp) {
		t.Fatalf("encoded names %v, want %v", wire, exp)
	}
	// What the wire adds around them is not an HTTP header.
	h[bus.HdrStatus] = []string{"200"}
	h["Nats-Request-Info"] = []string{"{}"}
	h["Status"] = []string{"503"}
	bus.DecodeHTTPHeaders(h)
	if !reflect.DeepEqual(h, want) {
		t.Fatalf("decoded %v, want %v", h, want)
	}
}

// Ordinary headers, the hot path, cost nothing.
func TestHTTPHeadersOrdinaryAllocFree(t *testing.T) {
	h := map[string][]string{
		"Content-Type": {"application/json"}, "Accept": {"*/*"}, "User-Agent": {"x"},
		"X-Forwarded-For": {"1.2.3.4"}, "Traceparent": {"00-1-2-01"}, "Authorization": {"Bearer t"},
	}
	if n := testing.AllocsPerRun(100, func() {
		bus.EncodeHTTPHeaders(h)
		bus.DecodeHTTPHeaders(h)
		for k := range h {
			_ = bus.EncodeHeaderName(k)
			_, _ = bus.DecodeHeaderName(k)
		}
	}); n != 0 {
		t.Errorf("%v allocations per run for ordinary headers", n)
	}
}

// Over a real server: HTTP headers named like the protocol's own arrive as
// sent, an empty reply with an HTTP "Status: 503" is a reply and not "no
// responders", and a value with CR/LF cannot start a header of its own
// (nats.go writes CR and LF as spaces).
func TestHTTPHeadersOverNATS(t *testing.T) {
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	got := make(chan nats.Header, 1)
	_, err := nc.Subscribe("echo", func(m *nats.Msg) {
		h := nats.Header(maps.Clone(m.Header))
		bus.DecodeHTTPHeaders(h)
		got <- maps.Clone(h)
		// Echo the HTTP headers back, encoded, with an empty body.
		bus.EncodeHTTPHeaders(h)
		h[bus.HdrStatus] = []string{"200"}
		_ = m.RespondMsg(&nats.Msg{Header: h})
	})
	if err != nil {
		t.Fatal(err)
	}
	sent := map[string][]string{
		"Status":          {"503"},
		"Description":     {"No Responders"},
		"Nats-Trace-Only": {"true"}, // unescaped, the server would not deliver the message
		"Nats-Trace-Dest": {"trace.sink"},
		"Nats-Msg-Id":     {"m1"},
		"X-Split":         {"a\r\nStatus: 503\r\nNats-Trace-Only: true"},
	}
	want := maps.Clone(sent)
	want["X-Split"] = []string{"a  Status: 503  Nats-Trace-Only: true"}
	h := nats.Header(maps.Clone(sent))
	bus.EncodeHTTPHeaders(h)
	h[bus.HdrMethod] = []string{"GET"}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	reply, err := nc.RequestMsgWithContext(ctx, &nats.Msg{Subject: "echo", Header: h})
	if errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("an HTTP Status header was taken for the protocol's: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if in := <-got; !reflect.DeepEqual(map[string][]string(in), want) {
		t.Errorf("responder got %v, want %v", in, want)
	}
	rh := maps.Clone(reply.Header)
	bus.DecodeHTTPHeaders(rh)
	if !reflect.DeepEqual(map[string][]string(rh), want) {
		t.Errorf("reply carried %v, want %v", rh, want)
	}
}

// FuzzHeaderName checks the name mapping is total and exact: every name
// comes back, every wire name that decodes is the one encoding of its
// name, and no encoded name can be read as a NATS or wire name.
func FuzzHeaderName(f *testing.F) {
	for _, s := range []string{"Content-Type", "Status", "status", "Description", "Nats-Msg-Id",
		"nats-", "Nmqtt-Pub", "KV-Operation", "Jetway-Status", "Jetway-H-Status", "Jetway-H-", "Jetway-H-Jetway-H-X",
		"Status,Jetway-H-Status,Jetway-H-Jetway-H-Status", "Traceparent,Nats-Trace-Dest"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, name := range append(strings.Split(s, ","), s) {
			if name == "" {
				continue
			}
			wire := bus.EncodeHeaderName(name)
			if back, ok := bus.DecodeHeaderName(wire); !ok || back != name {
				t.Fatalf("%q encodes as %q, which decodes to %q, %v", name, wire, back, ok)
			}
			if protocolName(wire) || (strings.HasPrefix(strings.ToLower(wire), "jetway-") && !strings.HasPrefix(wire, bus.HeaderEscape)) {
				t.Fatalf("%q encodes as %q, a NATS or wire name", name, wire)
			}
		}
		if back, ok := bus.DecodeHeaderName(s); ok {
			if wire := bus.EncodeHeaderName(back); wire != s {
				t.Fatalf("wire name %q decodes to %q, which encodes as %q", s, back, wire)
			}
		}
		// A header set survives the in-place round trip, whatever its
		// names, and encoded it holds no NATS name.
		h := map[string][]string{}
		for i, name := range strings.Split(s, ",") {
			if name != "" {
				h[name] = []string{strings.Repeat("v", i+1)}
			}
		}
		want := maps.Clone(h)
		bus.EncodeHTTPHeaders(h)
		for k := range h {
			if protocolName(k) {
				t.Fatalf("encoded %v holds %q", want, k)
			}
		}
		bus.DecodeHTTPHeaders(h)
		if !reflect.DeepEqual(h, want) {
			t.Fatalf("round trip of %v gave %v", want, h)
		}
	})
}

// protocolName reports names NATS reads as its own, in any case.
func protocolName(k string) bool {
	l := strings.ToLower(k)
	return l == "status" || l == "description" || l == "kv-operation" ||
		strings.HasPrefix(l, "nats-") || strings.HasPrefix(l, "nmqtt-")
}

// BenchmarkHTTPHeaders is the cost per request of both directions for a
// typical set of ordinary headers.
func BenchmarkHTTPHeaders(b *testing.B) {
	h := map[string][]string{
		"Accept": {"*/*"}, "Accept-Encoding": {"gzip"}, "Authorization": {"Bearer t"},
		"Content-Type": {"application/json"}, "User-Agent": {"x"}, "X-Forwarded-For": {"1.2.3.4"},
		"X-Forwarded-Host": {"h"}, "X-Forwarded-Proto": {"http"}, "Traceparent": {"00-1-2-01"}, "X-Request-Id": {"r"},
	}
	b.ReportAllocs()
	for b.Loop() {
		bus.EncodeHTTPHeaders(h)
		bus.DecodeHTTPHeaders(h)
	}
}
