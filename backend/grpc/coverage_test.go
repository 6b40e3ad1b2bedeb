package grpcbackend_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/jetway-gw/jetway/internal/grpcdemo"
	"github.com/jetway-gw/jetway/internal/jetwaytest"
	"github.com/jetway-gw/jetway/registry"
)

// routed answers as the demo, with an enum field set to a value other
// than its zero.
type routed struct{ grpcdemo.Server }

func (r *routed) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	resp, err := r.Server.UnaryCall(ctx, req)
	if resp != nil {
		resp.GrpclbRouteType = testpb.GrpclbRouteType_GRPCLB_ROUTE_TYPE_BACKEND
	}
	return resp, err
}

// An enum in the answer is written by its name (the proto3 JSON mapping),
// or by its number with enums_as_numbers; zero values too with
// emit_unpopulated.
func TestEnumOutput(t *testing.T) {
	g := jetwaytest.Start(t)
	addr := serveTest(t, &routed{}, false)
	publishGRPC(g, "names", "/names", addr, "grpc.testing.TestService/UnaryCall", "")
	publishGRPC(g, "numbers", "/numbers", addr, "grpc.testing.TestService/UnaryCall", `,"json_options":{"enums_as_numbers":true,"emit_unpopulated":true}`)
	body := `{"payload":{"type":"COMPRESSABLE","body":"eA=="}}`
	if r := g.Do("POST", "/names", strings.NewReader(body)); r.Status != 200 || !strings.Contains(r.Body, `"grpclbRouteType":"GRPCLB_ROUTE_TYPE_BACKEND"`) {
		t.Fatalf("enum by name: %d %s", r.Status, r.Body)
	}
	r := g.Do("POST", "/numbers", strings.NewReader(body))
	if r.Status != 200 || !strings.Contains(r.Body, `"grpclbRouteType":2`) || !strings.Contains(r.Body, `"type":0`) {
		t.Fatalf("enums as numbers: %d %s", r.Status, r.Body)
	}
}

// A sandbox app reaches the sandbox tier's gRPC target, a production app
// the production one. With both servers gone, production answers from its
// fallback and the sandbox tier (which has none) says 503 UNAVAILABLE at
// once, not at the deadline.
func TestSandboxTierAndFallback(t *testing.T) {
	g := jetwaytest.Start(t)
	serve := func(hostname string) (*grpc.Server, string) {
		t.Helper()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s := grpcdemo.Start(l, hostname)
		t.Cleanup(s.Stop)
		return s, l.Addr().String()
	}
	prod, prodAddr := serve("production")
	sandbox, sandboxAddr := serve("sandbox")
	liveKey, liveRec, _ := registry.NewAPIKey()
	testKey, testRec, _ := registry.NewAPIKey()
	g.PutApps(
		&registry.App{ID: "live", Status: registry.AppActive, Keys: []registry.AppKey{liveRec}, APIs: []string{"*"}},
		&registry.App{ID: "tester", Status: registry.AppActive, Keys: []registry.AppKey{testRec}, APIs: []string{"*"}, Sandbox: true},
	)
	g.Publish(fmt.Sprintf(`{"name":"orders","pool":"p","route":{"method":"POST","path":"/orders"},"auth":{"methods":["key"]},"timeout":"10s",
		"backend":{"type":"grpc","target":%q,"method":"grpc.testing.TestService/UnaryCall"},
		"fallback":{"static":{"status":200,"body":"later"}},
		"sandbox":{"backend":{"type":"grpc","target":%q,"method":"grpc.testing.TestService/UnaryCall"}}}`, prodAddr, sandboxAddr))
	g.WaitServing("orders@sandbox", g.EdgeWatcher.Current().APIs["orders"].Revision)
	for _, c := range []struct{ key, want string }{{liveKey, "production"}, {testKey, "sandbox"}} {
		if r := g.Do("POST", "/orders", strings.NewReader(`{}`), "X-Api-Key", c.key); r.Status != 200 || !strings.Contains(r.Body, `"hostname":"`+c.want+`"`) {
			t.Errorf("%s: %d %s", c.want, r.Status, r.Body)
		}
	}
	prod.Stop()
	sandbox.Stop()
	if r := g.Do("POST", "/orders", strings.NewReader(`{}`), "X-Api-Key", liveKey); r.Status != 200 || r.Body != "later" || r.Header.Get("X-Jetway-Fallback") != "static" {
		t.Errorf("production with its server gone: %d %q %v", r.Status, r.Body, r.Header)
	}
	if r := g.Do("POST", "/orders", strings.NewReader(`{}`), "X-Api-Key", testKey); r.Status != 503 || !strings.Contains(r.Body, `"code":14`) {
		t.Errorf("sandbox with its server gone: %d %s", r.Status, r.Body)
	}
}
