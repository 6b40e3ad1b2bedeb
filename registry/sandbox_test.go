package registry

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSandboxTier(t *testing.T) {
	doc := `
name: orders.get
pool: orders
route: {path: "/v1/orders/{id}"}
backend: {type: http, url: "http://orders:8080/orders/{id}"}
timeout: 2s
breaker: {failure_ratio: 0.5}
rate_limits: [{limit: 100}]
auth: {methods: [key]}
sandbox:
  backend: {type: mock, json: {id: sandbox}}
  rate_limits: [{limit: 5, window: 1m}]
`
	a, err := ParseAPI("orders.get", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if a.IsSandbox() || a.Key() != "orders.get" || a.Subject() != "jetway.api.orders.orders.get" {
		t.Errorf("production tier: sandbox %v key %q subject %q", a.IsSandbox(), a.Key(), a.Subject())
	}
	sb := a.SandboxAPI()
	switch {
	case !sb.IsSandbox() || sb.Key() != "orders.get@sandbox" || sb.Subject() != "jetway.sandbox.sandbox.orders.get":
		t.Errorf("sandbox tier: key %q subject %q", sb.Key(), sb.Subject())
	case sb.Pool != DefaultSandboxPool || sb.TimeoutOrDefault() != 2*time.Second || sb.Concurrency != DefaultConcurrency:
		t.Errorf("sandbox defaults: pool %q timeout %v concurrency %d", sb.Pool, sb.TimeoutOrDefault(), sb.Concurrency)
	case sb.Backend.Type != BackendMock || sb.Backend.Status != 200:
		t.Errorf("sandbox backend %+v", sb.Backend)
	case sb.Breaker != nil || len(sb.RateLimits) != 1 || sb.RateLimits[0].Limit != 5:
		t.Errorf("sandbox governance: breaker %v rate limits %+v", sb.Breaker, sb.RateLimits)
	case sb.Route != a.Route || sb.Sandbox != nil:
		t.Errorf("sandbox route %+v", sb.Route)
	}
	if (&API{Name: "x"}).SandboxAPI() != nil {
		t.Error("an API without a sandbox has a sandbox tier")
	}
	// The stored form keeps the sandbox.
	again, err := ParseAPI("orders.get", a.Marshal())
	if err != nil || again.SandboxAPI().Backend.Type != BackendMock {
		t.Fatalf("round trip: %v %+v", err, again)
	}
}

func TestSandboxProblems(t *testing.T) {
	doc := `
name: orders.get
pool: orders
route: {path: "/v1/orders/{id}"}
backend: {type: http, url: "http://orders:8080/orders/{id}"}
sandbox:
  pool: "bad pool"
  backend: {type: http, url: "http://sandbox:8080/orders/{nope}"}
  timeout: 10m
  rate_limits: [{limit: 0}]
  extra: 1
`
	_, err := ParseAPI("", []byte(doc))
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"sandbox.pool", "sandbox.backend.url", "{nope}", "sandbox.timeout", "sandbox.rate_limits.0", "extra", "auth.methods: an API with a sandbox tier needs"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("problems %q do not mention %q", err, want)
		}
	}
	_, err = ParseAPI("", []byte(strings.Replace(doc, "  backend: {type: http, url: \"http://sandbox:8080/orders/{nope}\"}\n", "", 1)))
	if err == nil || !strings.Contains(err.Error(), "backend") {
		t.Errorf("a sandbox without a backend: %v", err)
	}
}

// TestExamples keeps the shipped example entries valid.
func TestExamples(t *testing.T) {
	files, err := filepath.Glob("../examples/apis/*")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	for _, f := range files {
		doc, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseAPI("", doc); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}
