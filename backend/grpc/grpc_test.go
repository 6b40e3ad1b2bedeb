package grpcbackend_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	grpcbackend "github.com/jetway-gw/jetway/backend/grpc"
	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/internal/grpcdemo"
	"github.com/jetway-gw/jetway/internal/jetwaytest"
	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/workers"
)

// startGRPC runs grpc-go's interop test service with reflection.
func startGRPC(t *testing.T) string {
	t.Helper()
	return serveTest(t, &grpcdemo.Server{Hostname: "demo-host"}, false)
}

// serveTest runs impl as grpc.testing.TestService (with reflection unless
// blind) until the test ends, and returns its address.
func serveTest(t *testing.T, impl testpb.TestServiceServer, blind bool, opts ...grpc.ServerOption) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(opts...)
	testpb.RegisterTestServiceServer(s, impl)
	if !blind {
		reflection.Register(s)
	}
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return l.Addr().String()
}

func publishGRPC(g *jetwaytest.Gateway, name, route, target, method, extra string) {
	g.T.Helper()
	g.Publish(fmt.Sprintf(`{"name":%q,"pool":"p","route":{"method":"POST","path":%q},"timeout":"2s",
		"backend":{"type":"grpc","target":%q,"method":%q%s}}`, name, route, target, method, extra))
}

// JSON in, a message to the server, its answer back as JSON, with the
// server's metadata and trailers as headers.
func TestUnaryCall(t *testing.T) {
	g := jetwaytest.Start(t)
	addr := startGRPC(t)
	publishGRPC(g, "unary", "/unary", addr, "grpc.testing.TestService/UnaryCall",
		`,"metadata":["X-Grpc-Test-Echo-Initial","X-Grpc-Test-Echo-Trailing-Bin"]`)

	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	r := g.Do("POST", "/unary", strings.NewReader(`{"payload":{"body":"aGVsbG8="}}`),
		"X-Grpc-Test-Echo-Initial", "hi", "X-Grpc-Test-Echo-Trailing-Bin", base64.StdEncoding.EncodeToString([]byte{0, 1, 2}), "Traceparent", tp)
	if r.Status != 200 || r.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("call: %d %v %s", r.Status, r.Header, r.Body)
	}
	var resp struct {
		Payload  struct{ Body string }
		Hostname string
	}
	if err := json.Unmarshal([]byte(r.Body), &resp); err != nil || resp.Payload.Body != "aGVsbG8=" || resp.Hostname != "demo-host" {
		t.Fatalf("body %s (%v)", r.Body, err)
	}
	if got := r.Header.Get("Grpc-Metadata-X-Grpc-Test-Echo-Initial"); got != "hi" {
		t.Errorf("header metadata: %q (%v)", got, r.Header)
	}
	if got := r.Header.Get("Grpc-Trailer-X-Grpc-Test-Echo-Trailing-Bin"); got != "AAEC" {
		t.Errorf("binary trailer: %q (%v)", got, r.Header)
	}
	// The request id always travels, and so does the caller's trace
	// context with tracing off (no metadata entry lists it).
	if got := r.Header.Get("Grpc-Metadata-X-Request-Id"); got == "" || got != r.Header.Get("X-Request-Id") {
		t.Errorf("request id: metadata %q, response %q", got, r.Header.Get("X-Request-Id"))
	}
	if got := r.Header.Get("Grpc-Metadata-X-Seen-Traceparent"); !strings.Contains(got, "4bf92f3577b34da6a3ce929d0e0e4736") {
		t.Errorf("traceparent: the backend saw %q", got)
	}
}

// Query parameters and route parameters become fields of the request
// message; what does not fit is a 400 that names the field.
func TestRequestFromParamsAndQuery(t *testing.T) {
	g := jetwaytest.Start(t)
	addr := startGRPC(t)
	g.Publish(fmt.Sprintf(`{"name":"sized","pool":"p","route":{"method":"POST","path":"/sized/{response_size}"},
		"backend":{"type":"grpc","target":%q,"method":"grpc.testing.TestService/UnaryCall","json_options":{"emit_unpopulated":true,"proto_names":true}}}`, addr))
	r := g.Do("POST", "/sized/3?fillUsername=true&payload.type=COMPRESSABLE", nil)
	if r.Status != 200 || !strings.Contains(r.Body, `"eA=="`) && !strings.Contains(r.Body, `"eHh4"`) {
		t.Fatalf("params: %d %s", r.Status, r.Body)
	}
	if !strings.Contains(r.Body, `"oauth_scope"`) {
		t.Errorf("emit_unpopulated with proto names: %s", r.Body)
	}
	for _, tc := range []struct{ path, body, want string }{
		{"/sized/3?nosuch=1", "", "nosuch"},
		{"/sized/3?fillUsername=maybe", "", "fillUsername"},
		{"/sized/x", "", "responseSize"},
		{"/sized/3", `{"payload":{"bodyy":"x"}}`, "bodyy"},
		{"/sized/3", `{"payload":`, "body does not fit"},
	} {
		r := g.Do("POST", tc.path, strings.NewReader(tc.body))
		if r.Status != 400 || r.Code != "BAD_REQUEST" || !strings.Contains(r.Body, tc.want) {
			t.Errorf("%s %s: %d %s, want 400 naming %s", tc.path, tc.body, r.Status, r.Body, tc.want)
		}
	}
	g.Publish(fmt.Sprintf(`{"name":"lenient","pool":"p","route":{"method":"POST","path":"/lenient"},
		"backend":{"type":"grpc","target":%q,"method":"grpc.testing.TestService/UnaryCall","allow_unknown_query":true}}`, addr))
	if r := g.Do("POST", "/lenient?utm_source=x", nil); r.Status != 200 {
		t.Errorf("allow_unknown_query: %d %s", r.Status, r.Body)
	}
}

// A gRPC status becomes the HTTP status of the shared table, with the
// google.rpc.Status as the body and its details decoded — every code of
// the table, DEADLINE_EXCEEDED from the backend itself (its own deadline,
// well within the API's) included.
func TestStatusMapping(t *testing.T) {
	g := jetwaytest.Start(t)
	addr := startGRPC(t)
	publishGRPC(g, "unary", "/unary", addr, "grpc.testing.TestService/UnaryCall", "")
	for code, want := range map[int]int{1: 499, 2: 500, 3: 400, 4: 504, 5: 404, 6: 409, 7: 403, 8: 429, 9: 400, 10: 409, 11: 400, 12: 501, 13: 500, 14: 503, 15: 500, 16: 401} {
		r := g.Do("POST", "/unary", strings.NewReader(fmt.Sprintf(`{"responseStatus":{"code":%d,"message":"asked"}}`, code)))
		var st struct {
			Code    int
			Message string
			Details []map[string]any
		}
		if r.Status != want || json.Unmarshal([]byte(r.Body), &st) != nil || st.Code != code || st.Message != "asked" {
			t.Errorf("code %d: %d %s, want %d", code, r.Status, r.Body, want)
			continue
		}
		if r.Header.Get("Grpc-Trailer-Grpc-Status-Details-Bin") != "" {
			t.Errorf("code %d: gRPC's own trailer is a header: %v", code, r.Header)
		}
		if len(st.Details) != 1 || st.Details[0]["@type"] != "type.googleapis.com/google.rpc.ErrorInfo" || st.Details[0]["reason"] != "REQUESTED" {
			t.Errorf("code %d: details %v", code, st.Details)
		}
	}
	// A method or service the server does not have: 501 from reflection,
	// before any call.
	publishGRPC(g, "nomethod", "/nomethod", addr, "grpc.testing.TestService/NoSuch", "")
	publishGRPC(g, "nosvc", "/nosvc", addr, "grpc.testing.NoService/X", "")
	for _, p := range []string{"/nomethod", "/nosvc"} {
		if r := g.Do("POST", p, nil); r.Status != 501 || !strings.Contains(r.Body, `"code":12`) && !strings.Contains(r.Body, `"code": 12`) {
			t.Errorf("%s: %d %s", p, r.Status, r.Body)
		}
	}
}

// RESOURCE_EXHAUSTED (429) trips the breaker like a 5xx.
func TestResourceExhaustedIsAFailure(t *testing.T) {
	g := jetwaytest.Start(t)
	addr := startGRPC(t)
	publishGRPC(g, "unary", "/unary", addr, "grpc.testing.TestService/UnaryCall", `},"breaker":{"consecutive_failures":2`)
	for i := 0; i < 2; i++ {
		if r := g.Do("POST", "/unary", strings.NewReader(`{"responseStatus":{"code":8}}`)); r.Status != 429 {
			t.Fatalf("call %d: %d %s", i, r.Status, r.Body)
		}
	}
	if r := g.Do("POST", "/unary", nil); r.Code != "CIRCUIT_OPEN" {
		t.Fatalf("after two RESOURCE_EXHAUSTED: %d %s", r.Status, r.Body)
	}
}

// A server stream comes back whole in the form the caller accepts; a
// stream that stalls ends at the deadline: with a last element saying so
// once its first message went out, with 504 before. Either way the
// backend's handler sees its context end and the call leaves no goroutine
// behind; the backend's call comes in with the caller's deadline
// (grpc-timeout).
func TestServerStreaming(t *testing.T) {
	g := jetwaytest.Start(t)
	watch := newHandlerWatch("/grpc.testing.TestService/StreamingOutputCall")
	addr := serveTest(t, &grpcdemo.Server{Hostname: "demo-host"}, false, grpc.StreamInterceptor(watch.intercept))
	publishGRPC(g, "stream", "/stream", addr, "grpc.testing.TestService/StreamingOutputCall", "")
	body := `{"responseParameters":[{"size":1},{"size":2},{"size":3}]}`
	r := g.Do("POST", "/stream", strings.NewReader(body))
	var arr []map[string]map[string]string
	if r.Status != 200 || json.Unmarshal([]byte(r.Body), &arr) != nil || len(arr) != 3 || arr[2]["payload"]["body"] != "eHh4" {
		t.Fatalf("array: %d %s", r.Status, r.Body)
	}
	r = g.Do("POST", "/stream", strings.NewReader(body), "Accept", "application/x-ndjson")
	if r.Header.Get("Content-Type") != "application/x-ndjson" || strings.Count(r.Body, "\n") != 3 {
		t.Fatalf("ndjson: %v %q", r.Header, r.Body)
	}
	r = g.Do("POST", "/stream", strings.NewReader(body), "Accept", "text/event-stream")
	if r.Header.Get("Content-Type") != "text/event-stream" || strings.Count(r.Body, "data: ") != 3 || !strings.Contains(r.Body, "id: 2\n") {
		t.Fatalf("sse: %v %q", r.Header, r.Body)
	}
	// An error after two messages ends the stream with it.
	r = g.Do("POST", "/stream", strings.NewReader(`{"responseParameters":[{"size":1},{"size":1}],"responseStatus":{"code":14,"message":"gone"}}`), "Accept", "application/x-ndjson")
	if lines := strings.Split(strings.TrimSpace(r.Body), "\n"); len(lines) != 3 || !strings.Contains(lines[2], `"error"`) || !strings.Contains(lines[2], "gone") {
		t.Fatalf("error mid-stream: %q", r.Body)
	}
	for _, stall := range []struct{ name, body string }{
		{"after a message", `{"responseParameters":[{"size":1},{"size":1,"intervalUs":10000000}]}`},
		{"before any", `{"responseParameters":[{"size":1,"intervalUs":10000000}]}`},
	} {
		// A few at once: what one call would leave behind, they leave
		// more of than the count's slack.
		watch.rearm()
		base := goroutines()
		start := time.Now()
		var wg sync.WaitGroup
		for range stalledCalls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := g.Do("POST", "/stream", strings.NewReader(stall.body))
				var arr []map[string]any
				if stall.name == "before any" {
					if r.Status != http.StatusGatewayTimeout || r.Code != "GATEWAY_TIMEOUT" {
						t.Errorf("stalled stream %s: %d %s", stall.name, r.Status, r.Body)
					}
				} else if err := json.Unmarshal([]byte(r.Body), &arr); r.Status != 200 || err != nil || len(arr) != 2 || !strings.Contains(r.Body, `{"error":{"code":"GATEWAY_TIMEOUT"`) {
					t.Errorf("stalled stream %s: %d %s", stall.name, r.Status, r.Body)
				}
			}()
		}
		wg.Wait()
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("stalled streams %s answered after %v, past the 2s deadline", stall.name, d)
		}
		watch.waitCancelled(t, "stalled stream "+stall.name, stalledCalls)
		goroutinesBackTo(t, base)
	}
	watch.checkDeadlines(t, 2*time.Second)
}

// A backend without reflection: a clear 502 while no schema was ever read.
func TestNoReflection(t *testing.T) {
	g := jetwaytest.Start(t)
	addr := serveTest(t, &grpcdemo.Server{}, true)
	publishGRPC(g, "blind", "/blind", addr, "grpc.testing.TestService/UnaryCall", "")
	if r := g.Do("POST", "/blind", nil); r.Status != 502 || r.Code != "BAD_GATEWAY" || !strings.Contains(r.Body, "reflection") {
		t.Fatalf("no reflection: %d %s", r.Status, r.Body)
	}
}

// Once read, the schema outlives the reflection service: a backend that
// goes away and comes back on the same address is called with the schema
// it had; one that never comes back gets 503 (UNAVAILABLE), not a hang.
func TestSchemaKeptAcrossAnOutage(t *testing.T) {
	g := jetwaytest.Start(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	s := grpcdemo.Start(l, "first")
	publishGRPC(g, "unary", "/unary", addr, "grpc.testing.TestService/UnaryCall", "")
	if r := g.Do("POST", "/unary", nil); r.Status != 200 {
		t.Fatalf("first: %d %s", r.Status, r.Body)
	}
	s.Stop()
	if r := g.Do("POST", "/unary", nil); r.Status != 503 {
		t.Fatalf("backend down: %d %s", r.Status, r.Body)
	}
	l2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("address not free again: %v", err)
	}
	// The same service without reflection: the kept schema still serves.
	s2 := grpc.NewServer()
	testpb.RegisterTestServiceServer(s2, &grpcdemo.Server{Hostname: "second"})
	go func() { _ = s2.Serve(l2) }()
	t.Cleanup(s2.Stop)
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := g.Do("POST", "/unary", nil)
		if r.Status == 200 && strings.Contains(r.Body, "second") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the backend came back: %d %s", r.Status, r.Body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// What the caller got wrong is the caller's 400 and never the backend's
// failure: malformed bodies and metadata HTTP/2 cannot carry do not open
// the breaker for every other caller.
func TestCallerErrorsDoNotTripTheBreaker(t *testing.T) {
	g := jetwaytest.Start(t)
	addr := startGRPC(t)
	publishGRPC(g, "unary", "/unary", addr, "grpc.testing.TestService/UnaryCall", `,"metadata":["X-Tenant"]},"breaker":{"consecutive_failures":2,"open_for":"1m"`)
	for i := 0; i < 3; i++ {
		if r := g.Do("POST", "/unary", strings.NewReader(`{not json`)); r.Status != 400 {
			t.Fatalf("malformed body: %d %s", r.Status, r.Body)
		}
		if r := g.Do("POST", "/unary", strings.NewReader(`{}`), "X-Tenant", "caf\xc3\xa9"); r.Status != 400 || !strings.Contains(r.Body, "printable ASCII") {
			t.Fatalf("non-ASCII metadata: %d %s", r.Status, r.Body)
		}
	}
	if r := g.Do("POST", "/unary", strings.NewReader(`{}`)); r.Status != 200 {
		t.Fatalf("a good call after the caller errors: %d %s", r.Status, r.Body)
	}
}

// bigHeader answers with response metadata far over any reply's room.
type bigHeader struct{ grpcdemo.Server }

func (*bigHeader) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	_ = grpc.SetHeader(ctx, metadata.Pairs("x-big", strings.Repeat("a", 9<<20)))
	return &testpb.SimpleResponse{}, nil
}

// A backend's metadata is bounded like its body: an oversized header list
// fails the call at once, not at the deadline.
func TestOversizedMetadata(t *testing.T) {
	g := jetwaytest.Start(t)
	addr := serveTest(t, &bigHeader{}, false)
	g.Publish(fmt.Sprintf(`{"name":"big","pool":"p","route":{"method":"POST","path":"/big"},"timeout":"10s",
		"backend":{"type":"grpc","target":%q,"method":"grpc.testing.TestService/UnaryCall"}}`, addr))
	start := time.Now()
	r := g.Do("POST", "/big", nil)
	if r.Status < 500 || r.Status == 504 || len(r.Header.Get("Grpc-Metadata-X-Big")) > 0 {
		t.Fatalf("oversized metadata: %d %.200s", r.Status, r.Body)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("oversized metadata answered after %v", d)
	}
}

// reflectionCounter counts the reflection streams a server serves.
type reflectionCounter struct{ n atomic.Int64 }

func (c *reflectionCounter) intercept(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if strings.Contains(info.FullMethod, "ServerReflection") {
		c.n.Add(1)
	}
	return h(srv, ss)
}

// reflectedUnary serves the test service, counting its reflection reads,
// and publishes /unary on UnaryCall, called once (the schema read).
func reflectedUnary(t *testing.T) (*jetwaytest.Gateway, *reflectionCounter) {
	t.Helper()
	g := jetwaytest.Start(t)
	c := &reflectionCounter{}
	addr := serveTest(t, &grpcdemo.Server{}, false, grpc.StreamInterceptor(c.intercept))
	publishGRPC(g, "unary", "/unary", addr, "grpc.testing.TestService/UnaryCall", "")
	if r := g.Do("POST", "/unary", nil); r.Status != 200 {
		t.Fatalf("first call: %d %s", r.Status, r.Body)
	}
	return g, c
}

// Callers cannot keep the backend's reflection busy: bodies naming fields
// the schema lacks ask for a new read at most once per refreshMin.
func TestUnknownFieldsDoNotAmplifyReflection(t *testing.T) {
	g, c := reflectedUnary(t)
	first := c.n.Load()
	for i := 0; i < 200; i++ {
		if r := g.Do("POST", "/unary", strings.NewReader(`{"nosuch":1}`)); r.Status != 400 {
			t.Fatalf("unknown field: %d %s", r.Status, r.Body)
		}
	}
	time.Sleep(100 * time.Millisecond)
	if extra := c.n.Load() - first; extra > 1 {
		t.Fatalf("200 bodies with an unknown field made %d more reflection reads", extra)
	}
}

// A backend answering UNIMPLEMENTED may have moved the method: the worker
// reads the schema again (once refreshMin has passed since the last read,
// in the background, the schema at hand serving meanwhile) — not only
// every five minutes.
func TestUnimplementedRefreshesTheSchema(t *testing.T) {
	grpcbackend.SetRefreshMin(t, 200*time.Millisecond)
	g, c := reflectedUnary(t)
	first := c.n.Load()
	time.Sleep(300 * time.Millisecond) // past refreshMin: a refresh may be started
	if r := g.Do("POST", "/unary", nil); r.Status != 200 {
		t.Fatalf("a call: %d %s", r.Status, r.Body)
	}
	time.Sleep(100 * time.Millisecond)
	if n := c.n.Load(); n != first {
		t.Fatalf("a call that went well read the schema again (%d reads, %d before)", n, first)
	}
	if r := g.Do("POST", "/unary", strings.NewReader(`{"responseStatus":{"code":12,"message":"moved"}}`)); r.Status != 501 {
		t.Fatalf("UNIMPLEMENTED: %d %s", r.Status, r.Body)
	}
	// The next call serves with the schema at hand and starts the read.
	natstest.CheckFor(t, 5*time.Second, 50*time.Millisecond, func() error {
		if r := g.Do("POST", "/unary", nil); r.Status != 200 {
			return fmt.Errorf("after UNIMPLEMENTED: %d %s", r.Status, r.Body)
		}
		if n := c.n.Load(); n == first {
			return errors.New("no new reflection read")
		}
		return nil
	})
}

// With tls settings the call is gRPC over mutual TLS: the server's
// certificate is checked against the entry's CA and the worker proves
// itself with its own; without them a TLS server is not reached.
func TestMutualTLS(t *testing.T) {
	g := jetwaytest.Start(t)
	dir := t.TempDir()
	ca := jetwaytest.NewCA(t)
	now := time.Now()
	server := ca.Issue(t, dir, 2, now.Add(-time.Minute), now.Add(time.Hour), "grpc.test")
	client := ca.Issue(t, dir, 3, now.Add(-time.Minute), now.Add(time.Hour), "worker.test")
	cert, err := tls.LoadX509KeyPair(server.Cert, server.Key)
	if err != nil {
		t.Fatal(err)
	}
	addr := serveTest(t, &grpcdemo.Server{Hostname: "over-tls"}, false, grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool,
	})))
	caFile := ca.File(t, dir, "ca.pem")
	publishGRPC(g, "mtls", "/mtls", addr, "grpc.testing.TestService/UnaryCall",
		fmt.Sprintf(`,"tls":{"ca_file":%q,"cert_file":%q,"key_file":%q,"server_name":"grpc.test"}`, caFile, client.Cert, client.Key))
	if r := g.Do("POST", "/mtls", nil); r.Status != 200 || !strings.Contains(r.Body, "over-tls") {
		t.Fatalf("mutual TLS: %d %s", r.Status, r.Body)
	}
	publishGRPC(g, "plain", "/plain", addr, "grpc.testing.TestService/UnaryCall", "")
	if r := g.Do("POST", "/plain", nil); r.Status < 500 {
		t.Fatalf("plaintext to a TLS server: %d %s", r.Status, r.Body)
	}
	publishGRPC(g, "nocert", "/nocert", addr, "grpc.testing.TestService/UnaryCall",
		fmt.Sprintf(`,"tls":{"ca_file":%q,"server_name":"grpc.test"}`, caFile))
	if r := g.Do("POST", "/nocert", nil); r.Status < 500 {
		t.Fatalf("TLS without the client certificate: %d %s", r.Status, r.Body)
	}
}

// A schema pinned in the registry serves a server without reflection, and
// reflection is never asked.
func TestPinnedSchema(t *testing.T) {
	g := jetwaytest.Start(t)
	c := &reflectionCounter{}
	addr := serveTest(t, &grpcdemo.Server{Hostname: "pinned"}, true, grpc.StreamInterceptor(c.intercept))
	stored, err := g.Client.PutSchema(context.Background(), grpcdemo.DescriptorSet())
	if err != nil {
		t.Fatal(err)
	}
	publishGRPC(g, "pinned", "/pinned", addr, "grpc.testing.TestService/UnaryCall", `,"schema":"`+stored.Digest+`"`)
	for i := 0; i < 3; i++ {
		if r := g.Do("POST", "/pinned", strings.NewReader(`{"responseSize":2}`)); r.Status != 200 || !strings.Contains(r.Body, "pinned") {
			t.Fatalf("pinned schema: %d %s", r.Status, r.Body)
		}
	}
	// UNIMPLEMENTED from the server does not send a pinned schema back to
	// reflection either.
	publishGRPC(g, "gone", "/gone", addr, "grpc.testing.TestService/UnimplementedCall", `,"schema":"`+stored.Digest+`"`)
	if r := g.Do("POST", "/gone", nil); r.Status != 501 {
		t.Fatalf("unimplemented: %d %s", r.Status, r.Body)
	}
	g.Do("POST", "/gone", nil)
	if n := c.n.Load(); n != 0 {
		t.Fatalf("%d reflection calls with a pinned schema", n)
	}
}

// gatedStream sends one message, then waits for release (more messages)
// or for its caller to go away, which it reports on cancelled.
type gatedStream struct {
	grpcdemo.Server
	before    int // messages sent before waiting: 0 means 1, < 0 none
	release   chan struct{}
	cancelled chan struct{}
}

func (g *gatedStream) StreamingOutputCall(req *testpb.StreamingOutputCallRequest, st grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
	n := g.before
	if n == 0 {
		n = 1
	}
	for i := 0; i < n; i++ { // none when before < 0
		if err := st.Send(&testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: []byte("first")}}); err != nil {
			return err
		}
	}
	select {
	case <-g.release:
	case <-st.Context().Done():
		close(g.cancelled)
		return st.Context().Err()
	}
	for i := 0; i < 40; i++ {
		if err := st.Send(&testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: []byte("more")}}); err != nil {
			return err
		}
	}
	return nil
}

// NDJSON and SSE are relayed message by message: the caller has the
// first message while the backend's stream is still open, the whole
// stream arrives in order through the flow-controlled window, and a caller
// that goes away ends the backend's stream long before the deadline.
func TestRelayedStream(t *testing.T) {
	g := jetwaytest.Start(t)
	gs := &gatedStream{release: make(chan struct{}), cancelled: make(chan struct{})}
	addr := serveTest(t, gs, false)
	// A retry policy and a breaker do not cut a stream short.
	g.Publish(fmt.Sprintf(`{"name":"live","pool":"p","route":{"method":"POST","path":"/live"},"timeout":"30s",
		"retry":{"attempts":2},"breaker":{"consecutive_failures":5},
		"backend":{"type":"grpc","target":%q,"method":"grpc.testing.TestService/StreamingOutputCall"}}`, addr))
	g.Publish(fmt.Sprintf(`{"name":"unary","pool":"p","route":{"method":"POST","path":"/unary"},"timeout":"5s",
		"backend":{"type":"grpc","target":%q,"method":"grpc.testing.TestService/UnaryCall"}}`, addr))

	open := func(accept string) (*http.Response, *bufio.Reader) {
		t.Helper()
		req, _ := http.NewRequest("POST", g.URL+"/live", strings.NewReader(`{}`))
		req.Header.Set("Accept", accept)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != accept {
			t.Fatalf("stream: %d %v", resp.StatusCode, resp.Header)
		}
		return resp, bufio.NewReader(resp.Body)
	}
	// The first message arrives while the backend holds its stream open.
	resp, rd := open("application/x-ndjson")
	line, err := rd.ReadString('\n')
	if err != nil || !strings.Contains(line, base64.StdEncoding.EncodeToString([]byte("first"))) {
		t.Fatalf("first line %q %v", line, err)
	}
	close(gs.release)
	rest, _ := io.ReadAll(rd)
	resp.Body.Close()
	if n := strings.Count(string(rest), "\n"); n != 40 {
		t.Fatalf("%d more lines, want 40: %q", n, rest)
	}

	// A caller that goes away mid-stream ends the backend's stream.
	gs.release, gs.cancelled = make(chan struct{}), make(chan struct{})
	resp, rd = open("text/event-stream")
	if ev, err := rd.ReadString('\n'); err != nil || !strings.HasPrefix(ev, "id: 0") {
		t.Fatalf("first event %q %v", ev, err)
	}
	resp.Body.Close()
	select {
	case <-gs.cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the backend's stream outlived its caller")
	}

	// A caller gone right after an acknowledged chunk (every 8th), and one
	// gone before the backend sent anything, end the backend's stream.
	for _, before := range []int{bus.StreamWindow / 2, -1} {
		gs.release, gs.cancelled, gs.before = make(chan struct{}), make(chan struct{}), before
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "POST", g.URL+"/live", strings.NewReader(`{}`))
		req.Header.Set("Accept", "application/x-ndjson")
		done := make(chan struct{})
		go func() {
			defer close(done)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return
			}
			rd := bufio.NewReader(resp.Body)
			for i := 0; i < before; i++ {
				if _, err := rd.ReadString('\n'); err != nil {
					break
				}
			}
			cancel()
			resp.Body.Close()
		}()
		if before < 0 {
			time.Sleep(300 * time.Millisecond) // the call is in, the backend silent
			cancel()
		}
		select {
		case <-gs.cancelled:
		case <-time.After(10 * time.Second):
			t.Fatalf("after %d messages, the backend's stream outlived its caller", before)
		}
		cancel()
		<-done
	}
	gs.before = 0

	// A stream cut at the deadline ends with a line saying so; the
	// backend's handler sees its context end, and nothing the call
	// started outlives it.
	g.Publish(fmt.Sprintf(`{"name":"short","pool":"p","route":{"method":"POST","path":"/short"},"timeout":"1s",
		"backend":{"type":"grpc","target":%q,"method":"grpc.testing.TestService/StreamingOutputCall"}}`, addr))
	gs.release, gs.cancelled = make(chan struct{}), make(chan struct{})
	base := goroutines()
	cut := g.Do("POST", "/short", strings.NewReader(`{}`), "Accept", "application/x-ndjson")
	if lines := strings.Split(strings.TrimSpace(cut.Body), "\n"); cut.Status != 200 || len(lines) != 2 || !strings.Contains(lines[1], `{"error":{"code":"GATEWAY_TIMEOUT"`) {
		t.Fatalf("a stream cut at its deadline: %d %q", cut.Status, cut.Body)
	}
	select {
	case <-gs.cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the backend's handler of a stream cut at its deadline never saw its context end")
	}
	goroutinesBackTo(t, base)

	// A unary method asked for NDJSON answers once, as usual.
	req, _ := http.NewRequest("POST", g.URL+"/unary", strings.NewReader(`{}`))
	req.Header.Set("Accept", "application/x-ndjson")
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if r.StatusCode != 200 || r.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("unary with Accept ndjson: %d %v %s", r.StatusCode, r.Header, b)
	}
}

// The worker's client span of a gRPC call follows the RPC conventions, and
// its trace context reaches the server as traceparent metadata.
func TestClientSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	g := jetwaytest.StartWith(t, jetwaytest.Options{Worker: workers.Options{Tracing: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))}})
	addr := startGRPC(t)
	publishGRPC(g, "unary", "/unary", addr, "grpc.testing.TestService/UnaryCall", "")
	r := g.Do("POST", "/unary", nil)
	if r.Status != 200 {
		t.Fatalf("call: %d %s", r.Status, r.Body)
	}
	var client sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.SpanKind() == trace.SpanKindClient {
			client = s
		}
	}
	if client == nil || client.Name() != "grpc.testing.TestService/UnaryCall" {
		t.Fatalf("no client span named for the method: %v", client)
	}
	attrs := map[string]string{}
	for _, kv := range client.Attributes() {
		attrs[string(kv.Key)] = kv.Value.String()
	}
	host, port, _ := net.SplitHostPort(addr)
	for k, want := range map[string]string{"rpc.system": "grpc", "rpc.service": "grpc.testing.TestService", "rpc.method": "UnaryCall", "server.address": host, "server.port": port, "rpc.grpc.status_code": "0"} {
		if attrs[k] != want {
			t.Errorf("%s = %q, want %q (%v)", k, attrs[k], want, attrs)
		}
	}
	if tp := r.Header.Get("Grpc-Metadata-X-Seen-Traceparent"); !strings.Contains(tp, client.SpanContext().TraceID().String()) {
		t.Errorf("the server saw traceparent %q, not the span's trace %s", tp, client.SpanContext().TraceID())
	}
	// A failed call's span has the status the server answered.
	if r := g.Do("POST", "/unary", strings.NewReader(`{"responseStatus":{"code":8,"message":"busy"}}`)); r.Status != 429 {
		t.Fatalf("RESOURCE_EXHAUSTED: %d %s", r.Status, r.Body)
	}
	ended := rec.Ended()
	var code string
	for _, s := range ended[len(ended)-2:] {
		for _, kv := range s.Attributes() {
			if s.SpanKind() == trace.SpanKindClient && kv.Key == "rpc.grpc.status_code" {
				code = kv.Value.String()
			}
		}
	}
	if code != "8" {
		t.Errorf("rpc.grpc.status_code of a RESOURCE_EXHAUSTED call: %q", code)
	}
}

// A caller that asks for a stream and never reads holds nothing past the
// call's deadline: the edge's write deadline frees its slot.
func TestStreamCallerThatNeverReads(t *testing.T) {
	g := jetwaytest.Start(t)
	addr := startGRPC(t)
	g.Publish(fmt.Sprintf(`{"name":"big","pool":"p","route":{"method":"POST","path":"/big"},"timeout":"3s","edge_concurrency":1,
		"backend":{"type":"grpc","target":%q,"method":"grpc.testing.TestService/StreamingOutputCall"}}`, addr))
	// The worker has the method's schema (server reflection) before the
	// silent call: a first call that failed on it would hold no slot.
	natstest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		if r := g.Do("POST", "/big", strings.NewReader(`{"responseParameters":[{"size":1}]}`), "Accept", "application/x-ndjson"); r.Status != 200 {
			return fmt.Errorf("a small stream: %d %s", r.Status, r.Body)
		}
		return nil
	})
	// The silent caller reads its status line and nothing more. Only a
	// 200 says it holds the slot: a last probe still in flight may have
	// had it, and then the silent caller was refused and must try again.
	body := `{"responseParameters":[` + strings.TrimSuffix(strings.Repeat(`{"size":262144},`, 200), ",") + `]}`
	natstest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		c, err := net.Dial("tcp", strings.TrimPrefix(g.URL, "http://"))
		if err != nil {
			return err
		}
		t.Cleanup(func() { _ = c.Close() })
		_ = c.(*net.TCPConn).SetReadBuffer(4096)
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "POST /big HTTP/1.1\r\nHost: x\r\nAccept: application/x-ndjson\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		line, err := bufio.NewReaderSize(c, 16).ReadString('\n')
		if !strings.HasPrefix(line, "HTTP/1.1 200") {
			_ = c.Close()
			return fmt.Errorf("the silent caller was answered %q %v", line, err)
		}
		return nil
	})
	// While it holds the API's one edge slot, others are refused; once
	// its deadline has passed, they are not.
	overloaded := func() bool { return g.Do("POST", "/big", strings.NewReader(`{}`)).Code == "OVERLOADED" }
	natstest.CheckFor(t, 5*time.Second, 20*time.Millisecond, func() error {
		if !overloaded() {
			return errors.New("the silent caller does not hold the slot yet")
		}
		return nil
	})
	natstest.CheckFor(t, 15*time.Second, 100*time.Millisecond, func() error {
		if overloaded() {
			return errors.New("a caller that never reads still holds the API's slot long after its 1s deadline")
		}
		return nil
	})
}

// A route without a path serves the method where gRPC names it.
func TestRouteByMethodName(t *testing.T) {
	g := jetwaytest.Start(t)
	addr := startGRPC(t)
	g.Publish(fmt.Sprintf(`{"name":"byname","pool":"p","route":{},"backend":{"type":"grpc","target":%q,"method":"grpc.testing.TestService/UnaryCall"}}`, addr))
	if r := g.Do("POST", "/grpc.testing.TestService/UnaryCall", strings.NewReader(`{"responseSize":1}`)); r.Status != 200 || !strings.Contains(r.Body, `"eA=="`) {
		t.Fatalf("POST /grpc.testing.TestService/UnaryCall: %d %s", r.Status, r.Body)
	}
}

// A relayed stream's worker span lasts until the stream ends, not just
// until its first message.
func TestRelayedStreamSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	g := jetwaytest.StartWith(t, jetwaytest.Options{Worker: workers.Options{Tracing: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))}})
	addr := startGRPC(t)
	publishGRPC(g, "stream", "/stream", addr, "grpc.testing.TestService/StreamingOutputCall", "")
	r := g.Do("POST", "/stream", strings.NewReader(`{"responseParameters":[{"size":1},{"size":1,"intervalUs":300000},{"size":1,"intervalUs":300000}]}`),
		"Accept", "application/x-ndjson")
	if r.Status != 200 || strings.Count(r.Body, "\n") != 3 {
		t.Fatalf("stream: %d %q", r.Status, r.Body)
	}
	natstest.CheckFor(t, 2*time.Second, 10*time.Millisecond, func() error {
		for _, s := range rec.Ended() {
			if s.SpanKind() == trace.SpanKindServer {
				if d := s.EndTime().Sub(s.StartTime()); d < 600*time.Millisecond {
					return fmt.Errorf("the worker's span lasted %v, less than the stream's 600ms", d)
				}
				return nil
			}
		}
		return errors.New("no worker span")
	})
}

// A worker that goes away mid-stream (its connection cut) ends the
// caller's stream within seconds, with a last line saying so, not at the
// deadline.
func TestStreamWorkerGone(t *testing.T) {
	g := jetwaytest.Start(t, "none")
	nc, err := nats.Connect(g.Server.ClientURL(), nats.CustomInboxPrefix(bus.InboxPrefix(bus.UserWorker, "p")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	w, err := workers.New(workers.Options{Conn: nc, Pools: []string{"p"}})
	if err != nil {
		t.Fatal(err)
	}
	rw := registry.NewWatcher(registry.WatcherOptions{Conn: nc})
	rw.OnChange(w.Apply)
	ctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	go func() { _ = rw.Run(ctx) }()
	gs := &gatedStream{release: make(chan struct{}), cancelled: make(chan struct{})}
	addr := serveTest(t, gs, false)
	a := g.Publish(fmt.Sprintf(`{"name":"live","pool":"p","route":{"method":"POST","path":"/live"},"timeout":"60s",
		"backend":{"type":"grpc","target":%q,"method":"grpc.testing.TestService/StreamingOutputCall"}}`, addr))
	natstest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if rev, ok := w.Serving("live"); !ok || rev != a.Revision {
			return errors.New("the worker does not serve the api yet")
		}
		return nil
	})
	req, _ := http.NewRequest("POST", g.URL+"/live", strings.NewReader(`{}`))
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	if _, err := rd.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	nc.Close() // the worker is gone
	rest, _ := io.ReadAll(rd)
	if !strings.Contains(string(rest), `"code":"BAD_GATEWAY"`) {
		t.Fatalf("after the worker went: %q", rest)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("the stream ended %v after its worker went, not within seconds", d)
	}
}

// A host rewrite is the call's :authority; the connection stays the
// target's.
func TestHostRewriteIsTheAuthority(t *testing.T) {
	var authority atomic.Value
	addr := serveTest(t, &grpcdemo.Server{Hostname: "demo-host"}, false, grpc.UnaryInterceptor(
		func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			md, _ := metadata.FromIncomingContext(ctx)
			authority.Store(strings.Join(md.Get(":authority"), ","))
			return h(ctx, req)
		}))
	g := jetwaytest.Start(t)
	publishGRPC(g, "auth", "/auth", addr, "grpc.testing.TestService/UnaryCall", `},"rewrite":{"request":{"host":"orders.partner.example"}`)
	if r := g.Do("POST", "/auth", strings.NewReader(`{}`)); r.Status != 200 || authority.Load() != "orders.partner.example" {
		t.Fatalf("%d %s: authority %v", r.Status, r.Body, authority.Load())
	}
}

// A stream that fails after its head went out counts against the API's
// breaker as the same status would have as the answer: UNAVAILABLE opens
// it, a client's INVALID_ARGUMENT does not.
func TestMidStreamFailureCountsForTheBreaker(t *testing.T) {
	g := jetwaytest.Start(t)
	addr := startGRPC(t)
	for _, name := range []string{"bs", "bc"} {
		g.Publish(fmt.Sprintf(`{"name":%q,"pool":"p","route":{"method":"POST","path":"/%s"},"timeout":"2s","breaker":{"consecutive_failures":2,"open_for":"1m"},
			"backend":{"type":"grpc","target":%q,"method":"grpc.testing.TestService/StreamingOutputCall"}}`, name, name, addr))
	}
	failing := func(path string, code int) {
		t.Helper()
		body := fmt.Sprintf(`{"responseParameters":[{"size":1}],"responseStatus":{"code":%d,"message":"gone"}}`, code)
		if r := g.Do("POST", path, strings.NewReader(body), "Accept", "application/x-ndjson"); r.Status != 200 || !strings.Contains(r.Body, "gone") {
			t.Fatalf("%s: %d %q", path, r.Status, r.Body)
		}
	}
	for range 2 {
		failing("/bs", 14) // UNAVAILABLE
		failing("/bc", 3)  // INVALID_ARGUMENT
	}
	natstest.CheckFor(t, 3*time.Second, 10*time.Millisecond, func() error {
		if st, _ := g.Worker.BreakerState("bs"); st != "open" {
			return fmt.Errorf("bs's breaker is %s after two streams failed UNAVAILABLE", st)
		}
		return nil
	})
	if r := g.Do("POST", "/bs", strings.NewReader(`{"responseParameters":[{"size":1}]}`), "Accept", "application/x-ndjson"); r.Code != "CIRCUIT_OPEN" {
		t.Fatalf("while open: %d %s", r.Status, r.Body)
	}
	if st, _ := g.Worker.BreakerState("bc"); st != "closed" {
		t.Fatalf("a caller's error mid-stream opened the breaker: %s", st)
	}
}

// connCounter counts a gRPC server's client connections.
type connCounter struct {
	open, made atomic.Int64
}

func (c *connCounter) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (c *connCounter) HandleRPC(context.Context, stats.RPCStats)                         {}
func (c *connCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (c *connCounter) HandleConn(_ context.Context, s stats.ConnStats) {
	switch s.(type) {
	case *stats.ConnBegin:
		c.open.Add(1)
		c.made.Add(1)
	case *stats.ConnEnd:
		c.open.Add(-1)
	}
}

// The APIs of one target share one connection, kept across registry
// changes (a republished entry does not reconnect), and closed once no
// API uses it.
func TestConnectionsSharedAndClosed(t *testing.T) {
	g := jetwaytest.Start(t)
	cc := &connCounter{}
	addr := serveTest(t, &grpcdemo.Server{Hostname: "demo-host"}, false, grpc.StatsHandler(cc))
	publishGRPC(g, "one", "/one", addr, "grpc.testing.TestService/UnaryCall", "")
	publishGRPC(g, "two", "/two", addr, "grpc.testing.TestService/EmptyCall", "")
	for _, p := range []string{"/one", "/two"} {
		if r := g.Do("POST", p, nil); r.Status != 200 {
			t.Fatalf("%s: %d %s", p, r.Status, r.Body)
		}
	}
	if n := cc.made.Load(); n != 1 {
		t.Errorf("two APIs of one target made %d connections", n)
	}
	// A change of one entry rebuilds its backend, not the connection.
	g.Publish(fmt.Sprintf(`{"name":"one","pool":"p","route":{"method":"POST","path":"/one"},"timeout":"3s","description":"changed",
		"backend":{"type":"grpc","target":%q,"method":"grpc.testing.TestService/UnaryCall"}}`, addr))
	if r := g.Do("POST", "/one", nil); r.Status != 200 {
		t.Fatalf("after the change: %d %s", r.Status, r.Body)
	}
	if n := cc.made.Load(); n != 1 {
		t.Errorf("a republished API reconnected: %d connections made", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, name := range []string{"one", "two"} {
		if err := g.Client.Delete(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	natstest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if n := cc.open.Load(); n != 0 {
			return fmt.Errorf("%d connections open after the last API of the target went", n)
		}
		return nil
	})
}

// flaky answers UNAVAILABLE to its first fail calls, then as the demo.
type flaky struct {
	grpcdemo.Server
	calls, fail atomic.Int64
}

func (f *flaky) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	if f.calls.Add(1) <= f.fail.Load() {
		return nil, status.Error(codes.Unavailable, "warming up")
	}
	return f.Server.UnaryCall(ctx, req)
}

// UNAVAILABLE is a failure the API's retry policy retries — for a call
// that may be sent twice (a gRPC call is a POST: with an
// Idempotency-Key) — and otherwise the caller's 503 at once.
func TestUnavailableRetriedWhereSafe(t *testing.T) {
	g := jetwaytest.Start(t)
	f := &flaky{Server: grpcdemo.Server{Hostname: "demo-host"}}
	addr := serveTest(t, f, false)
	g.Publish(fmt.Sprintf(`{"name":"flaky","pool":"p","route":{"method":"POST","path":"/flaky"},"timeout":"2s",
		"retry":{"attempts":3,"on":["5xx"],"backoff":"1ms","max_backoff":"2ms"},
		"backend":{"type":"grpc","target":%q,"method":"grpc.testing.TestService/UnaryCall"}}`, addr))
	call := func(fail int64, hdr ...string) (jetwaytest.Result, int64) {
		t.Helper()
		f.calls.Store(0)
		f.fail.Store(fail)
		return g.Do("POST", "/flaky", nil, hdr...), f.calls.Load()
	}
	if r, n := call(2, "Idempotency-Key", "k1"); r.Status != 200 || n != 3 {
		t.Errorf("with an Idempotency-Key, two UNAVAILABLE then success: %d %s after %d calls", r.Status, r.Body, n)
	}
	if r, n := call(1); r.Status != 503 || n != 1 {
		t.Errorf("without one, not retried: %d %s after %d calls", r.Status, r.Body, n)
	}
}

// A gRPC backend's failures take the API's fallback like an HTTP one's:
// UNAVAILABLE from the server, and a target nobody listens on.
func TestFallbackOnGRPCFailures(t *testing.T) {
	g := jetwaytest.Start(t)
	f := &flaky{Server: grpcdemo.Server{Hostname: "demo-host"}}
	f.fail.Store(1 << 30)
	addr := serveTest(t, f, false)
	for _, c := range []struct{ name, target string }{{"down.busy", addr}, {"down.gone", "127.0.0.1:1"}} {
		g.Publish(fmt.Sprintf(`{"name":%q,"pool":"p","route":{"method":"POST","path":"/%s"},"timeout":"2s",
			"fallback":{"static":{"status":200,"body":"later"}},
			"backend":{"type":"grpc","target":%q,"method":"grpc.testing.TestService/UnaryCall"}}`, c.name, c.name, c.target))
		if r := g.Do("POST", "/"+c.name, nil); r.Status != 200 || r.Body != "later" || r.Header.Get("X-Jetway-Fallback") != "static" {
			t.Errorf("%s: %d %q %v", c.name, r.Status, r.Body, r.Header)
		}
	}
}
