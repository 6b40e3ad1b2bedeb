package registry_test

import (
	"fmt"

	"github.com/jetway-gw/jetway/registry"
)

// An entry is parsed, defaulted and validated in one call; every problem is
// listed with its field path.
func ExampleParseAPI() {
	a, err := registry.ParseAPI("", []byte(`
name: orders.get
pool: orders
route: {path: "/v1/orders/{id}"}
backend: {type: http, url: "http://orders.internal:9001/orders/{id}"}
timeout: 800ms
`))
	fmt.Println(a.Name, a.Route.Method, a.Subject(), a.Concurrency, err)

	_, err = registry.ParseAPI("", []byte(`{"name":"x","pool":"p","route":{"path":"v1"},"backend":{"type":"ftp"}}`))
	fmt.Println(err)
	// Output:
	// orders.get GET jetway.api.orders.orders.get 64 <nil>
	// invalid entry: backend.type: must be grpc, http, mock or nats (got "ftp"); route.path: must start with "/"

}
