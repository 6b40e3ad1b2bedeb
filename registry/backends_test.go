package registry

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/jetway-gw/jetway/schemas"
)

// The schema's enum of backend types and the registry's table of kinds are
// written in two places; this keeps them equal, so a type cannot be added
// to one and forgotten in the other.
func TestSchemaBackendTypesAreTheKinds(t *testing.T) {
	var doc struct {
		Defs struct {
			Backend struct {
				Properties struct {
					Type struct {
						Enum []string `json:"enum"`
					} `json:"type"`
				} `json:"properties"`
			} `json:"backend"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(schemas.APISchemaJSON, &doc); err != nil {
		t.Fatal(err)
	}
	enum := slices.Sorted(slices.Values(doc.Defs.Backend.Properties.Type.Enum))
	if kinds := BackendKinds(); !slices.Equal(enum, kinds) {
		t.Fatalf("schema backend types %q, registry kinds %q", enum, kinds)
	}
}

func TestBackendKindMessages(t *testing.T) {
	if got := kindList(); got != "grpc, http, mock or nats" {
		t.Fatalf("kindList() = %q", got)
	}
	for _, tc := range []struct {
		b    Backend
		want string
	}{
		{Backend{Type: BackendHTTP, URL: "http://h/o/{id}"}, "http http://h/o/{id}"},
		{Backend{Type: BackendMock}, "mock "},
	} {
		if got := tc.b.Label(); got != tc.want {
			t.Errorf("Label() = %q, want %q", got, tc.want)
		}
	}
}

// A grpc backend's route may leave out its path: POST /package.Service/Method.
func TestGRPCRouteDefault(t *testing.T) {
	a, err := ParseAPI("", []byte(`{"name":"g","pool":"p","route":{},"backend":{"type":"grpc","target":"h:1","method":"shop.v1.Orders/GetOrder"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if a.Route.Method != "POST" || a.Route.Path != "/shop.v1.Orders/GetOrder" {
		t.Fatalf("route %+v", a.Route)
	}
	if _, err := ParseAPI("", []byte(`{"name":"h","pool":"p","route":{},"backend":{"type":"mock"}}`)); err == nil || !strings.Contains(err.Error(), "path") {
		t.Fatalf("a mock without a route path: %v", err)
	}
}
