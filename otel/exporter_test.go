package otel

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// recordSpans makes real SDK spans: a remote parent, a server span with
// every attribute type, an event and a link, an error status, and a child
// from another tracer (another scope).
func recordSpans(t *testing.T) []sdktrace.ReadOnlySpan {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	res := resource.NewSchemaless(attribute.String("service.name", "jetway-test"))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithResource(res))
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	psid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ts, _ := trace.ParseTraceState("vendor=x")
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: psid, TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: true})
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), parent)
	ctx, s := tp.Tracer("edge", trace.WithInstrumentationVersion("v1")).Start(ctx, "GET /v1/x",
		trace.WithSpanKind(trace.SpanKindServer), trace.WithLinks(trace.Link{SpanContext: parent, Attributes: []attribute.KeyValue{attribute.Int("l", 1)}}))
	s.SetAttributes(
		attribute.String("s", "é"), attribute.String("empty", ""), attribute.Bool("t", true), attribute.Bool("f", false),
		attribute.Int64("neg", -5), attribute.Float64("pi", 3.25), attribute.StringSlice("ss", []string{"a", ""}),
		attribute.Int64Slice("is", []int64{1, -1}), attribute.BoolSlice("bs", []bool{true}), attribute.Float64Slice("fs", []float64{0.5}),
	)
	s.AddEvent("ev", trace.WithAttributes(attribute.String("k", "v")))
	s.SetStatus(codes.Error, "boom")
	_, c := tp.Tracer("worker").Start(ctx, "process", trace.WithSpanKind(trace.SpanKindClient))
	c.End()
	s.End()
	return rec.Ended()
}

// TestEncodeMatchesProto decodes the hand-written OTLP encoding with the
// generated protobuf types and checks every field Jetway's spans use.
func TestEncodeMatchesProto(t *testing.T) {
	spans := recordSpans(t)
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(appendRequest(nil, spans), &req); err != nil {
		t.Fatal(err)
	}
	if len(req.ResourceSpans) != 1 {
		t.Fatalf("%d resource spans, want 1", len(req.ResourceSpans))
	}
	rs := req.ResourceSpans[0]
	if a := rs.Resource.Attributes; len(a) != 1 || a[0].Key != "service.name" || a[0].Value.GetStringValue() != "jetway-test" {
		t.Fatalf("resource %v", rs.Resource)
	}
	if len(rs.ScopeSpans) != 2 {
		t.Fatalf("%d scopes, want 2", len(rs.ScopeSpans))
	}
	byName := map[string]*tracepb.Span{}
	for _, ss := range rs.ScopeSpans {
		for _, sp := range ss.Spans {
			byName[ss.Scope.Name+":"+sp.Name] = sp
		}
		if ss.Scope.Name == "edge" && ss.Scope.Version != "v1" {
			t.Errorf("scope version %q", ss.Scope.Version)
		}
	}
	for _, want := range spans {
		got := byName[want.InstrumentationScope().Name+":"+want.Name()]
		if got == nil {
			t.Fatalf("span %s missing", want.Name())
		}
		sc := want.SpanContext()
		tid, sid, psid := sc.TraceID(), sc.SpanID(), want.Parent().SpanID()
		if !bytes.Equal(got.TraceId, tid[:]) || !bytes.Equal(got.SpanId, sid[:]) || !bytes.Equal(got.ParentSpanId, psid[:]) {
			t.Errorf("%s: ids %x %x %x", want.Name(), got.TraceId, got.SpanId, got.ParentSpanId)
		}
		if got.TraceState != sc.TraceState().String() || int(got.Kind) != int(want.SpanKind()) ||
			got.StartTimeUnixNano != uint64(want.StartTime().UnixNano()) || got.EndTimeUnixNano != uint64(want.EndTime().UnixNano()) {
			t.Errorf("%s: %v", want.Name(), got)
		}
		wantFlags := uint32(0x101)
		if want.Parent().IsRemote() {
			wantFlags |= 0x200
		}
		if got.Flags != wantFlags {
			t.Errorf("%s: flags %#x, want %#x", want.Name(), got.Flags, wantFlags)
		}
		if len(got.Attributes) != len(want.Attributes()) {
			t.Fatalf("%s: %d attributes, want %d", want.Name(), len(got.Attributes), len(want.Attributes()))
		}
		for i, kv := range want.Attributes() {
			g := got.Attributes[i]
			if g.Key != string(kv.Key) || anyValue(g.Value) != kv.Value.String() {
				t.Errorf("%s: attribute %s = %q, want %q", want.Name(), g.Key, anyValue(g.Value), kv.Value.String())
			}
		}
	}
	s := byName["edge:GET /v1/x"]
	if s.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || s.Status.Message != "boom" {
		t.Errorf("status %v", s.Status)
	}
	if len(s.Events) != 1 || s.Events[0].Name != "ev" || s.Events[0].Attributes[0].Value.GetStringValue() != "v" || s.Events[0].TimeUnixNano == 0 {
		t.Errorf("events %v", s.Events)
	}
	if len(s.Links) != 1 || s.Links[0].TraceState != "vendor=x" || s.Links[0].Attributes[0].Value.GetIntValue() != 1 || s.Links[0].Flags != 0x301 {
		t.Errorf("links %v", s.Links)
	}
}

// anyValue turns an AnyValue back into the attribute value it came from
// and renders it as attribute.Value.String does.
func anyValue(v *commonpb.AnyValue) string {
	switch x := v.Value.(type) {
	case *commonpb.AnyValue_StringValue:
		return attribute.StringValue(x.StringValue).String()
	case *commonpb.AnyValue_BoolValue:
		return attribute.BoolValue(x.BoolValue).String()
	case *commonpb.AnyValue_IntValue:
		return attribute.Int64Value(x.IntValue).String()
	case *commonpb.AnyValue_DoubleValue:
		return attribute.Float64Value(x.DoubleValue).String()
	case *commonpb.AnyValue_ArrayValue:
		vs := x.ArrayValue.Values
		switch vs[0].Value.(type) {
		case *commonpb.AnyValue_StringValue:
			out := make([]string, len(vs))
			for i, e := range vs {
				out[i] = e.GetStringValue()
			}
			return attribute.StringSliceValue(out).String()
		case *commonpb.AnyValue_BoolValue:
			out := make([]bool, len(vs))
			for i, e := range vs {
				out[i] = e.GetBoolValue()
			}
			return attribute.BoolSliceValue(out).String()
		case *commonpb.AnyValue_IntValue:
			out := make([]int64, len(vs))
			for i, e := range vs {
				out[i] = e.GetIntValue()
			}
			return attribute.Int64SliceValue(out).String()
		case *commonpb.AnyValue_DoubleValue:
			out := make([]float64, len(vs))
			for i, e := range vs {
				out[i] = e.GetDoubleValue()
			}
			return attribute.Float64SliceValue(out).String()
		}
	}
	return "?"
}

// countingHandler is a slog.Handler that keeps the messages it gets.
type countingHandler struct {
	mu   sync.Mutex
	msgs []string
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	line := r.Message
	r.Attrs(func(a slog.Attr) bool { line += " " + a.String(); return true })
	h.msgs = append(h.msgs, line)
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }
func (h *countingHandler) lines() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.msgs...)
}

// TestErrorLogRateLimited: one line per period per distinct error, and the
// next line counts the ones suppressed.
func TestErrorLogRateLimited(t *testing.T) {
	h := &countingHandler{}
	l := newErrorLog(slog.New(h), 10*time.Second)
	now := time.Unix(1000, 0)
	l.now = func() time.Time { return now }
	refused := &ExportError{Err: io.ErrUnexpectedEOF}
	for range 100 {
		l.Handle(refused)
	}
	l.Handle(context.DeadlineExceeded) // another error has its own line
	if got := h.lines(); len(got) != 2 {
		t.Fatalf("%d lines, want 2: %q", len(got), got)
	}
	now = now.Add(10 * time.Second)
	l.Handle(refused)
	got := h.lines()
	if len(got) != 3 || !strings.Contains(got[2], "suppressed=99") {
		t.Fatalf("lines %q: want a third one with suppressed=99", got)
	}
	for i := range 2 * maxDistinctErrors { // distinct messages do not grow the map without bound
		l.Handle(&ExportError{Err: io.EOF}) // same
		l.Handle(errorString(strings.Repeat("x", i)))
	}
	if len(l.seen) > maxDistinctErrors+1 {
		t.Fatalf("%d distinct errors kept", len(l.seen))
	}
}

type errorString string

func (e errorString) Error() string { return string(e) }

// traceFor makes a tracer provider on SetupTracing's batcher with cfg.
func traceFor(t *testing.T, cfg exporterConfig) (*sdktrace.TracerProvider, *batcher) {
	t.Helper()
	b := newBatcher(cfg)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(b))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, b
}

// TestDeadCollectorLogsLittle runs a real exporter against a closed port
// for 2 s with spans ending all the time and short batches: a couple of
// log lines at most (the SDK's handler printed 20–35 a second), the spans
// dropped and counted, and after the first refusal the exporter backs off
// instead of trying every batch.
func TestDeadCollectorLogsLittle(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String() + "/v1/traces"
	l.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", dead)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "10")
	t.Setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "16")
	h := &countingHandler{}
	// Through SetupTracing, as serve does: its error handler is the one
	// under test, for the exporter's and the SDK's errors alike.
	var stdlog bytes.Buffer
	restore := captureStdLog(&stdlog)
	defer restore()
	tp, err := SetupTracing(context.Background(), "jetway-test", slog.New(h))
	if err != nil {
		t.Fatal(err)
	}
	defer tp.Shutdown(context.Background())
	b := findBatcher(t, tp)
	tr := tp.Tracer("test")
	stop := time.Now().Add(2 * time.Second)
	spans := 0
	for time.Now().Before(stop) {
		_, s := tr.Start(context.Background(), "call")
		s.End()
		spans++
		if spans%64 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	_ = tp.ForceFlush(context.Background())
	lines := h.lines()
	if n := len(lines) + strings.Count(stdlog.String(), "\n"); n < 1 || n > 2 {
		t.Fatalf("%d log lines in 2 s against a dead collector, want 1 or 2:\n%s\n%s", n, strings.Join(lines, "\n"), stdlog.String())
	}
	if !strings.Contains(lines[0], "connection refused") {
		t.Errorf("log line %q does not say why", lines[0])
	}
	st := b.stats()
	if st.Exported != 0 || st.Dropped != int64(spans) {
		t.Errorf("stats %+v after %d spans: all must be dropped and counted", st, spans)
	}
	// 1 s back-off, then 2 s: at most two tries in 2 s, not one per batch.
	if st.Failures < 1 || st.Failures > 2 {
		t.Errorf("%d failed exports in 2 s, want 1 or 2 (back-off)", st.Failures)
	}
}

// findBatcher returns the batcher SetupTracing registered in tp.
func findBatcher(t *testing.T, tp *sdktrace.TracerProvider) *batcher {
	t.Helper()
	handlerMu.Lock()
	defer handlerMu.Unlock()
	if lastBatcher == nil {
		t.Fatal("SetupTracing made no batcher")
	}
	return lastBatcher
}

// TestLiveCollectorGetsEverySpan: spans reach a real HTTP collector in
// batches, decodable, with the configured headers and gzip; Shutdown
// flushes the rest; a collector that comes back after a failure gets spans
// again once the back-off is over.
func TestLiveCollectorGetsEverySpan(t *testing.T) {
	var mu sync.Mutex
	got, posts := 0, 0
	fail := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		posts++
		if fail {
			fail = false
			http.Error(w, "not yet", http.StatusServiceUnavailable)
			return
		}
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" ||
			r.Header.Get("Authorization") != "Bearer a b" || r.Header.Get("Content-Encoding") != "gzip" {
			t.Errorf("request %s %v", r.URL.Path, r.Header)
		}
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			t.Error(err)
			return
		}
		body, _ := io.ReadAll(zr)
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			t.Error(err)
			return
		}
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				got += len(ss.Spans)
			}
		}
	}))
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL+"/")
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Bearer%20a%20b")
	t.Setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
	t.Setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "10")
	cfg, err := loadExporterConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.backoffLo = 50 * time.Millisecond
	tp, b := traceFor(t, cfg)
	tr := tp.Tracer("test")
	end := func(n int) {
		for range n {
			_, s := tr.Start(context.Background(), "call")
			s.End()
		}
	}
	end(10) // one batch: refused (503), dropped
	waitFor(t, func() bool { return b.stats().Failures == 1 })
	time.Sleep(200 * time.Millisecond) // the 50 ms back-off is over, counted from a moment after the failure
	end(25)
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if st := b.stats(); got != 25 || st.Exported != 25 || st.Dropped != 10 {
		t.Fatalf("collector got %d spans in %d posts, stats %+v: want 25 exported, 10 dropped", got, posts, st)
	}
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !ok(); {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestExporterConfigErrors: bad settings are refused with ErrExporterConfig.
func TestExporterConfigErrors(t *testing.T) {
	for name, env := range map[string][2]string{
		"no scheme":   {"OTEL_EXPORTER_OTLP_ENDPOINT", "localhost:4318"},
		"ftp":         {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "ftp://x/v1/traces"},
		"header":      {"OTEL_EXPORTER_OTLP_HEADERS", "novalue"},
		"timeout":     {"OTEL_EXPORTER_OTLP_TIMEOUT", "-1"},
		"compression": {"OTEL_EXPORTER_OTLP_COMPRESSION", "zstd"},
		"batch":       {"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "0"},
		"ca":          {"OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent.pem"},
		"grpc":        {"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(env[0], env[1])
			if _, err := loadExporterConfig(); !errors.Is(err, ErrExporterConfig) {
				t.Fatalf("%s=%q: %v, want ErrExporterConfig", env[0], env[1], err)
			}
		})
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://traces.example/custom")
	if c, err := loadExporterConfig(); err != nil || c.url != "https://traces.example/custom" {
		t.Fatalf("%v %q: the signal's endpoint is used as is", err, c.url)
	}
}

// captureStdLog sends the standard logger (the SDK's default error
// handler writes there) to w until restore is called.
func captureStdLog(w io.Writer) (restore func()) {
	old, flags := log.Writer(), log.Flags()
	log.SetOutput(w)
	return func() { log.SetOutput(old); log.SetFlags(flags) }
}
