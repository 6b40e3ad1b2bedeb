package grpcbackend_test

import (
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/grpc/interop"

	"github.com/jetway-gw/jetway/internal/jetwaytest"
)

// grpc-go's own interop test server (not Jetway's copy of its
// conventions), with reflection: a unary and a server-streaming call.
func TestInteropTestServer(t *testing.T) {
	g := jetwaytest.Start(t)
	addr := serveTest(t, interop.NewTestServer(), false)
	publishGRPC(g, "unary", "/unary", addr, "grpc.testing.TestService/UnaryCall", "")
	publishGRPC(g, "stream", "/stream", addr, "grpc.testing.TestService/StreamingOutputCall", "")
	r := g.Do("POST", "/unary", strings.NewReader(`{"responseSize":3,"payload":{"body":"aGk="}}`))
	var resp struct{ Payload struct{ Type, Body string } }
	if r.Status != 200 || json.Unmarshal([]byte(r.Body), &resp) != nil || resp.Payload.Body != "AAAA" {
		t.Fatalf("unary: %d %s", r.Status, r.Body)
	}
	body := `{"responseParameters":[{"size":1},{"size":2},{"size":3}]}`
	r = g.Do("POST", "/stream", strings.NewReader(body), "Accept", "application/x-ndjson")
	if lines := strings.Split(strings.TrimSpace(r.Body), "\n"); r.Status != 200 || len(lines) != 3 || !strings.Contains(lines[2], `"AAAA"`) {
		t.Fatalf("stream as NDJSON: %d %q", r.Status, r.Body)
	}
	r = g.Do("POST", "/stream", strings.NewReader(body))
	var arr []map[string]map[string]string
	if r.Status != 200 || json.Unmarshal([]byte(r.Body), &arr) != nil || len(arr) != 3 || arr[1]["payload"]["body"] != "AAA=" {
		t.Fatalf("stream as an array: %d %s", r.Status, r.Body)
	}
}
