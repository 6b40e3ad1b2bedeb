package jetwaytest_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/jetway-gw/jetway/edge"
	"github.com/jetway-gw/jetway/internal/jetwaytest"
	"github.com/jetway-gw/jetway/workers"
)

// A test points an API at a real backend, publishes it and calls it
// through the edge. The harness needs the test's *testing.T, so this
// example is compiled but not run; TestExampleFlow runs the same steps.
func Example() {
	var t *testing.T // func TestOrders(t *testing.T) {

	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "order "+r.URL.Path+" for "+r.Header.Get("X-Jetway-App"))
	}))
	defer backend.Close()

	g := jetwaytest.Start(t, "orders") // nats-server, an edge, a worker of pool orders
	key := g.PutKeyedApp("shop")       // an active app with a fresh API key
	g.Publish(`{"name":"orders.get","pool":"orders","route":{"path":"/v1/orders/{id}"},
		"auth":{"methods":["key"]},"backend":{"type":"http","url":"` + backend.URL + `/orders/{id}"}}`)

	r := g.Do("GET", "/v1/orders/42", nil, "X-Api-Key", key)
	fmt.Println(r.Status, r.Body) // 200 order /orders/42 for shop
	r = g.Do("GET", "/v1/orders/42", nil)
	fmt.Println(r.Status, r.Code) // 401 UNAUTHENTICATED
}

// ExampleStartWith starts a gateway with edge and worker options, and a
// second worker of the same pool: Publish waits until both serve an API.
func ExampleStartWith() {
	var t *testing.T // func TestX(t *testing.T) {

	g := jetwaytest.StartWith(t, jetwaytest.Options{
		Edge:   edge.Options{MaxInFlight: 100},
		Worker: workers.Options{Pools: []string{"p"}},
	})
	second := g.AddWorker("p")
	a := g.Publish(`{"name":"hello","pool":"p","route":{"path":"/hello"},"backend":{"type":"mock","body":"hi"}}`)
	rev, _ := second.Serving("hello")
	fmt.Println(rev == a.Revision) // true
}
