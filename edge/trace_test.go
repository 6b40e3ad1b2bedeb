package edge_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/edge"
	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/workers"
)

// One trace spans edge → NATS → worker → backend, continuing the caller's
// traceparent, with the trace context carried in NATS headers.
func TestTraceAcrossNATS(t *testing.T) {
	var backendTP, backendTraceDest string
	var mu sync.Mutex
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		backendTP = r.Header.Get("Traceparent")
		backendTraceDest = r.Header.Get("Nats-Trace-Dest")
		mu.Unlock()
		io.WriteString(w, "traced")
	}))
	defer backend.Close()

	s := natstest.RunServer(t)
	edgeRec, workerRec := tracetest.NewSpanRecorder(), tracetest.NewSpanRecorder()
	edgeTP := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(edgeRec))
	workerTP := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(workerRec))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e, err := edge.New(edge.Options{Conn: natstest.Connect(t, s), Tracing: edgeTP})
	if err != nil {
		t.Fatal(err)
	}
	ew := registry.NewWatcher(registry.WatcherOptions{Conn: natstest.Connect(t, s)})
	ew.OnChange(e.Apply)
	go ew.Run(ctx)
	wnc := natstest.Connect(t, s)
	wk, err := workers.New(workers.Options{Conn: wnc, Tracing: workerTP})
	if err != nil {
		t.Fatal(err)
	}
	ww := registry.NewWatcher(registry.WatcherOptions{Conn: wnc})
	ww.OnChange(wk.Apply)
	go ww.Run(ctx)
	srv := httptest.NewServer(e)
	defer srv.Close()

	c, err := registry.NewClient(ctx, natstest.Connect(t, s, nats.Name("cli")), registry.BucketOptions{})
	if err != nil {
		t.Fatal(err)
	}
	key, rec, _ := registry.NewAPIKey()
	if _, err := c.PutApp(ctx, &registry.App{ID: "shop", Status: registry.AppActive, Keys: []registry.AppKey{rec}, APIs: []string{"*"}}); err != nil {
		t.Fatal(err)
	}
	a, err := c.Put(ctx, []byte(`{"name":"tr","pool":"p","route":{"path":"/tr"},"backend":{"type":"http","url":"`+backend.URL+`"},"auth":{"methods":["key"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 3*time.Second, 2*time.Millisecond, func() error {
		if rev, ok := wk.Serving("tr"); !ok || rev != a.Revision || ew.Current().APIs["tr"] == nil || ew.Current().Apps["shop"] == nil {
			return io.EOF
		}
		return nil
	})

	// A copy of what the edge puts on the bus.
	busConn := natstest.Connect(t, s)
	onBus, err := busConn.SubscribeSync(bus.APISubject("p", "tr"))
	if err != nil {
		t.Fatal(err)
	}
	// The copy must be subscribed at the server before the call is sent.
	if err := busConn.Flush(); err != nil {
		t.Fatal(err)
	}

	const callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	req, _ := http.NewRequest("GET", srv.URL+"/tr", nil)
	req.Header.Set("Traceparent", "00-"+callerTrace+"-00f067aa0ba902b7-01")
	req.Header.Set("X-Api-Key", key)
	// A caller may not pick where the NATS server sends message traces:
	// its header travels escaped (bus.EncodeHeaderName), an HTTP header
	// like any other, and reaches the backend as it was sent.
	req.Header.Set("Nats-Trace-Dest", "caller.picks")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}

	// The traced request tells the NATS server not to trace it itself (it
	// would copy every header of every message); that header goes no
	// further than the bus, and the caller's own never acts on NATS.
	m, err := onBus.NextMsg(2 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Header.Values("Nats-Trace-Dest"); len(got) != 1 || got[0] != "trace disabled" {
		t.Errorf("Nats-Trace-Dest on the bus %q, want [\"trace disabled\"]", got)
	}
	mu.Lock()
	if backendTraceDest != "caller.picks" {
		t.Errorf("backend got Nats-Trace-Dest %q, want the caller's own", backendTraceDest)
	}
	mu.Unlock()

	var spans []sdktrace.ReadOnlySpan
	natstest.CheckFor(t, 2*time.Second, 5*time.Millisecond, func() error {
		spans = append(edgeRec.Ended(), workerRec.Ended()...)
		if len(spans) < 4 {
			return io.EOF
		}
		return nil
	})
	kinds := map[string]trace.SpanKind{}
	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, sp := range spans {
		byName[sp.Name()] = sp
		if got := sp.SpanContext().TraceID().String(); got != callerTrace {
			t.Errorf("span %q in trace %s, want the caller's %s", sp.Name(), got, callerTrace)
		}
		kinds[sp.Name()] = sp.SpanKind()
	}
	for name, kind := range map[string]trace.SpanKind{
		"GET /tr":                 trace.SpanKindServer, // edge
		"send jetway.api.p.tr":    trace.SpanKindClient, // edge → NATS
		"process jetway.api.p.tr": trace.SpanKindServer, // worker
		"GET":                     trace.SpanKindClient, // worker → backend
	} {
		if got, ok := kinds[name]; !ok || got != kind {
			t.Errorf("span %q: kind %v (present %v); spans %v", name, got, ok, kinds)
		}
	}
	// The authenticated app shows on the edge's span and the worker's.
	for _, name := range []string{"GET /tr", "process jetway.api.p.tr"} {
		found := false
		if sp := byName[name]; sp != nil {
			for _, kv := range sp.Attributes() {
				found = found || (kv.Key == "jetway.app" && kv.Value.AsString() == "shop")
			}
		}
		if !found {
			t.Errorf("span %q has no jetway.app=shop", name)
		}
	}
	// Each hop is the child of the one before.
	for child, parent := range map[string]string{"send jetway.api.p.tr": "GET /tr", "process jetway.api.p.tr": "send jetway.api.p.tr", "GET": "process jetway.api.p.tr"} {
		c, p := byName[child], byName[parent]
		if c == nil || p == nil || c.Parent().SpanID() != p.SpanContext().SpanID() {
			t.Errorf("%q is not a child of %q", child, parent)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(backendTP) < 35 || backendTP[3:35] != callerTrace {
		t.Errorf("backend got traceparent %q", backendTP)
	}
}
