package natsbackend_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetway-gw/jetway/internal/jetwaytest"
	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/workers"
)

// An HTTP call reaches a nats.go micro service on Jetway's NATS and comes
// back: the body both ways, the route's parameters and the caller's
// headers in, the service's error codes as statuses out.
func TestMicroService(t *testing.T) {
	g := jetwaytest.Start(t)
	type seen struct {
		data   string
		header nats.Header
	}
	got := make(chan seen, 1)
	svc, err := micro.AddService(g.Conn, micro.Config{Name: "orders", Version: "1.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	add := func(subject string, h micro.HandlerFunc) {
		t.Helper()
		if err := svc.AddEndpoint(strings.ReplaceAll(subject, ".", "-"), h, micro.WithEndpointSubject(subject)); err != nil {
			t.Fatal(err)
		}
	}
	add("svc.orders.get", func(r micro.Request) {
		got <- seen{string(r.Data()), nats.Header(r.Headers())}
		_ = r.Respond([]byte(`{"id":"`+r.Headers().Get("Jetway-Param-Id")+`"}`), micro.WithHeaders(micro.Headers{"Content-Type": {"application/json"}, "X-Svc": {"1"}, "Nats-Internal": {"x"}}))
	})
	add("svc.orders.missing", func(r micro.Request) {
		_ = r.Error("404", "no such order", []byte(`{"id":"7"}`))
	})
	add("svc.orders.odd", func(r micro.Request) { _ = r.Error("E_ODD", "odd failure", nil) })
	add("svc.orders.slow", func(r micro.Request) {
		time.Sleep(2 * time.Second)
		_ = r.Respond(nil)
	})
	g.Publish(`{"name":"orders.get","pool":"p","route":{"method":"POST","path":"/orders/{id}"},"backend":{"type":"nats","subject":"svc.orders.get"}}`)
	g.Publish(`{"name":"orders.missing","pool":"p","route":{"path":"/missing"},"backend":{"type":"nats","subject":"svc.orders.missing"}}`)
	g.Publish(`{"name":"orders.odd","pool":"p","route":{"path":"/odd"},"backend":{"type":"nats","subject":"svc.orders.odd"}}`)
	g.Publish(`{"name":"orders.slow","pool":"p","route":{"path":"/slow"},"timeout":"300ms","backend":{"type":"nats","subject":"svc.orders.slow"}}`)
	g.Publish(`{"name":"orders.none","pool":"p","route":{"path":"/none"},"timeout":"10s","backend":{"type":"nats","subject":"svc.orders.nobody"}}`)

	r := g.Do("POST", "/orders/42?full=1", strings.NewReader(`{"q":1}`),
		"X-Tenant", "acme", "Nats-Msg-Id", "dedupe-me", "Jetway-Path", "/forged")
	if r.Status != 200 || r.Body != `{"id":"42"}` || r.Header.Get("Content-Type") != "application/json" || r.Header.Get("X-Svc") != "1" {
		t.Fatalf("call: %d %v %s", r.Status, r.Header, r.Body)
	}
	if r.Header.Get("Nats-Internal") != "" {
		t.Errorf("a Nats-* header of the reply reached the caller: %v", r.Header)
	}
	s := <-got
	if s.data != `{"q":1}` {
		t.Errorf("service got body %q", s.data)
	}
	for k, want := range map[string]string{
		"Jetway-Method": "POST", "Jetway-Path": "/orders/42", "Jetway-Query": "full=1", "Jetway-Param-Id": "42", "X-Tenant": "acme",
	} {
		if v := s.header.Get(k); v != want {
			t.Errorf("service got %s = %q, want %q (all: %v)", k, v, want, s.header)
		}
	}
	if s.header.Get("Nats-Msg-Id") != "" {
		t.Errorf("the caller's Nats-Msg-Id reached the service: %v", s.header)
	}
	if s.header.Get("X-Request-Id") == "" || s.header.Get("X-Request-Timeout") == "" {
		t.Errorf("no request id or timeout: %v", s.header)
	}

	r = g.Do("GET", "/missing", nil)
	var body struct {
		Error string          `json:"error"`
		Code  string          `json:"error_code"`
		Data  json.RawMessage `json:"data"`
	}
	if r.Status != 404 || json.Unmarshal([]byte(r.Body), &body) != nil || body.Error != "no such order" || body.Code != "404" || string(body.Data) != `{"id":"7"}` {
		t.Fatalf("service error: %d %s", r.Status, r.Body)
	}
	if r := g.Do("GET", "/odd", nil); r.Status != http.StatusBadGateway || !strings.Contains(r.Body, "odd failure") {
		t.Fatalf("a code that is no HTTP status (E_ODD): %d %s", r.Status, r.Body)
	}
	if r := g.Do("GET", "/slow", nil); r.Status != http.StatusGatewayTimeout || r.Code != "GATEWAY_TIMEOUT" {
		t.Fatalf("slow service: %d %s", r.Status, r.Body)
	}
	// Nobody listens: 503 from NATS's no-responders, long before the
	// API's 10 s deadline.
	start := time.Now()
	if r := g.Do("GET", "/none", nil); r.Status != http.StatusServiceUnavailable || r.Code != "NO_WORKERS" {
		t.Fatalf("no service: %d %s", r.Status, r.Body)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("no responders answered after %v, not at once", d)
	}
}

// A service that fails trips the API's breaker like an HTTP backend does.
func TestServiceErrorsCountForTheBreaker(t *testing.T) {
	g := jetwaytest.Start(t)
	sub, err := g.Conn.Subscribe("svc.flaky", func(m *nats.Msg) {
		r := nats.NewMsg(m.Reply)
		r.Header.Set("Nats-Service-Error-Code", "503")
		r.Header.Set("Nats-Service-Error", "down")
		_ = m.RespondMsg(r)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	g.Conn.Flush()
	g.Publish(`{"name":"flaky","pool":"p","route":{"path":"/flaky"},"backend":{"type":"nats","subject":"svc.flaky"},
		"breaker":{"consecutive_failures":3}}`)
	for i := 0; i < 3; i++ {
		if r := g.Do("GET", "/flaky", nil); r.Status != 503 || r.Code != "" {
			t.Fatalf("call %d: %d %s", i, r.Status, r.Body)
		}
	}
	if r := g.Do("GET", "/flaky", nil); r.Code != "CIRCUIT_OPEN" {
		t.Fatalf("after three failures: %d %s", r.Status, r.Body)
	}
}

// What a service replies that HTTP cannot carry never reaches the caller:
// a Content-Length that is not the body's, NUL and control bytes, a name
// HTTP refuses, a 1xx error code; a reply too big to send back is a fast
// 502, not a wait for the deadline.
func TestHostileReplies(t *testing.T) {
	g := jetwaytest.Start(t)
	maxResp := int(g.Conn.MaxPayload()) - 64<<10
	replies := map[string]func(m *nats.Msg) *nats.Msg{
		"svc.h.headers": func(m *nats.Msg) *nats.Msg {
			r := nats.NewMsg(m.Reply)
			r.Data = []byte("hello")
			r.Header["Content-Length"] = []string{"100"}
			r.Header["X-Nul"] = []string{"a\x00b\x01c"}
			r.Header["X-Good"] = []string{"yes"}
			return r
		},
		"svc.h.interim": func(m *nats.Msg) *nats.Msg {
			r := nats.NewMsg(m.Reply)
			r.Header.Set("Nats-Service-Error-Code", "101")
			r.Header.Set("Nats-Service-Error", "switching")
			return r
		},
		"svc.h.huge": func(m *nats.Msg) *nats.Msg {
			r := nats.NewMsg(m.Reply)
			r.Data = make([]byte, maxResp)                        // the most a reply may hold...
			r.Header.Set("X-Pad", strings.Repeat("p", 64<<10-30)) // ...with headers filling the room
			return r
		},
	}
	for subj, f := range replies {
		sub, err := g.Conn.Subscribe(subj, func(m *nats.Msg) { _ = m.RespondMsg(f(m)) })
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	g.Conn.Flush()
	for _, name := range []string{"headers", "interim", "huge"} {
		g.Publish(`{"name":"h.` + name + `","pool":"p","route":{"path":"/h/` + name + `"},"timeout":"10s","backend":{"type":"nats","subject":"svc.h.` + name + `"}}`)
	}
	r := g.Do("GET", "/h/headers", nil)
	if r.Status != 200 || r.Body != "hello" || r.Header.Get("X-Good") != "yes" || r.Header.Get("X-Nul") != "" {
		t.Fatalf("headers: %d %q %v", r.Status, r.Body, r.Header)
	}
	if r := g.Do("GET", "/h/interim", nil); r.Status != http.StatusBadGateway || !strings.Contains(r.Body, "switching") {
		t.Fatalf("a 1xx error code: %d %s", r.Status, r.Body)
	}
	start := time.Now()
	if r := g.Do("GET", "/h/huge", nil); r.Status != http.StatusBadGateway || r.Code != "BAD_GATEWAY" {
		t.Fatalf("a reply too big to send back: %d %.200s", r.Status, r.Body)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("a reply too big to send back was answered after %v", d)
	}
}

// The worker's client span of a NATS service call names the subject, and
// its trace context reaches the service.
func TestClientSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	g := jetwaytest.StartWith(t, jetwaytest.Options{Worker: workers.Options{Tracing: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))}})
	seen := make(chan string, 1)
	sub, err := g.Conn.Subscribe("svc.traced", func(m *nats.Msg) { seen <- m.Header.Get("Traceparent"); _ = m.Respond([]byte("ok")) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	g.Conn.Flush()
	g.Publish(`{"name":"traced","pool":"p","route":{"path":"/traced"},"backend":{"type":"nats","subject":"svc.traced"}}`)
	if r := g.Do("GET", "/traced", nil); r.Status != 200 {
		t.Fatalf("call: %d %s", r.Status, r.Body)
	}
	tp := <-seen
	for _, s := range rec.Ended() {
		if s.SpanKind() != trace.SpanKindClient {
			continue
		}
		if s.Name() != "svc.traced" || !strings.Contains(tp, s.SpanContext().TraceID().String()) {
			t.Fatalf("client span %q, service saw traceparent %q", s.Name(), tp)
		}
		for _, kv := range s.Attributes() {
			if kv.Key == "rpc.system" && kv.Value.AsString() == "nats" {
				return
			}
		}
		t.Fatalf("client span without rpc.system=nats: %v", s.Attributes())
	}
	t.Fatal("no client span")
}

// A nats backend works on the sandbox tier and takes the API's fallback
// like an http one: sandbox apps reach the sandbox service only, and a
// production service nobody answers for (no responders) is the fallback's
// answer, while the sandbox tier — which production governance does not
// touch — says 503 at once.
func TestSandboxTierAndFallback(t *testing.T) {
	g := jetwaytest.Start(t)
	serve := func(subject, answer string) *nats.Subscription {
		t.Helper()
		sub, err := g.Conn.Subscribe(subject, func(m *nats.Msg) { _ = m.Respond([]byte(answer)) })
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
		return sub
	}
	prod := serve("svc.prod", "production")
	sandbox := serve("svc.sandbox", "sandbox")
	if err := g.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	liveKey, liveRec, _ := registry.NewAPIKey()
	testKey, testRec, _ := registry.NewAPIKey()
	g.PutApps(
		&registry.App{ID: "live", Status: registry.AppActive, Keys: []registry.AppKey{liveRec}, APIs: []string{"*"}},
		&registry.App{ID: "tester", Status: registry.AppActive, Keys: []registry.AppKey{testRec}, APIs: []string{"*"}, Sandbox: true},
	)
	g.Publish(`{"name":"orders","pool":"p","route":{"path":"/orders"},"auth":{"methods":["key"]},"timeout":"2s",
		"backend":{"type":"nats","subject":"svc.prod"},
		"fallback":{"static":{"status":200,"body":"later"}},
		"sandbox":{"backend":{"type":"nats","subject":"svc.sandbox"}}}`)
	g.WaitServing("orders@sandbox", g.EdgeWatcher.Current().APIs["orders"].Revision)
	for _, c := range []struct{ key, want string }{{liveKey, "production"}, {testKey, "sandbox"}} {
		if r := g.Do("GET", "/orders", nil, "X-Api-Key", c.key); r.Status != 200 || r.Body != c.want {
			t.Errorf("%s: %d %q", c.want, r.Status, r.Body)
		}
	}
	_ = prod.Unsubscribe()
	_ = sandbox.Unsubscribe()
	if err := g.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	if r := g.Do("GET", "/orders", nil, "X-Api-Key", liveKey); r.Status != 200 || r.Body != "later" || r.Header.Get("X-Jetway-Fallback") != "static" {
		t.Errorf("production with no responders: %d %q %v", r.Status, r.Body, r.Header)
	}
	start := time.Now()
	if r := g.Do("GET", "/orders", nil, "X-Api-Key", testKey); r.Status != 503 || time.Since(start) > time.Second {
		t.Errorf("sandbox with no responders: %d %s after %v", r.Status, r.Body, time.Since(start))
	}
}

// A service's error code is the caller's status only when it is a final
// HTTP status, 200 to 599: a 1xx would be read by the caller's HTTP stack
// as an interim answer, and a code outside the range or not a number is no
// status at all. Those are 502, with the code in the body.
func TestServiceErrorCodeBounds(t *testing.T) {
	g := jetwaytest.Start(t)
	sub, err := g.Conn.Subscribe("svc.code", func(m *nats.Msg) {
		r := nats.NewMsg(m.Reply)
		r.Header.Set("Nats-Service-Error-Code", string(m.Data))
		r.Header.Set("Nats-Service-Error", "asked")
		_ = m.RespondMsg(r)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := g.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	g.Publish(`{"name":"code","pool":"p","route":{"method":"POST","path":"/code"},"backend":{"type":"nats","subject":"svc.code"}}`)
	for code, want := range map[string]int{"100": 502, "199": 502, "200": 200, "201": 201, "404": 404, "599": 599, "600": 502, "-1": 502, "4O4": 502} {
		r := g.Do("POST", "/code", strings.NewReader(code))
		var body struct {
			Error string `json:"error"`
			Code  string `json:"error_code"`
		}
		if r.Status != want || json.Unmarshal([]byte(r.Body), &body) != nil || body.Error != "asked" || body.Code != code {
			t.Errorf("Nats-Service-Error-Code %s: %d %s, want %d", code, r.Status, r.Body, want)
		}
	}
}
