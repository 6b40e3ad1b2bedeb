package bench

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/bench/internal/benchsrv"
)

// orderBody is a 1 KiB JSON order, orderSchema a schema that checks all of
// it (types, ranges, patterns, enums, required fields, no extra ones): the
// body and schema of the policy benchmarks.
var orderBody = func() string {
	var items []string
	for i := range 8 {
		items = append(items, fmt.Sprintf(`{"sku":"SKU-%06d","name":"item number %d of the order","quantity":%d,"unit_cents":%d,"currency":"EUR"}`, i, i, i+1, 1999+i))
	}
	b := `{"order_id":"ord-7f3a9c21","customer":{"id":"cus-00042","email":"someone@example.com","tier":"gold"},` +
		`"items":[` + strings.Join(items, ",") + `],"note":"leave at the door","express":true}`
	return b
}()

const orderSchema = `{"type":"object","additionalProperties":false,"required":["order_id","customer","items"],
  "properties":{
    "order_id":{"type":"string","pattern":"^ord-[0-9a-f]{8}$"},
    "customer":{"type":"object","required":["id","email"],"properties":{
      "id":{"type":"string","pattern":"^cus-[0-9]{5}$"},"email":{"type":"string","format":"email"},
      "tier":{"enum":["basic","silver","gold"]}}},
    "items":{"type":"array","minItems":1,"maxItems":100,"items":{"type":"object","additionalProperties":false,
      "required":["sku","quantity","unit_cents","currency"],"properties":{
        "sku":{"type":"string","pattern":"^SKU-[0-9]{6}$"},"name":{"type":"string","maxLength":200},
        "quantity":{"type":"integer","minimum":1,"maximum":1000},"unit_cents":{"type":"integer","minimum":0},
        "currency":{"enum":["EUR","USD","GBP"]}}}},
    "note":{"type":"string","maxLength":500},"express":{"type":"boolean"}}}`

// orderAPI is POST /orders to the mock backend, validated when validate is
// set: the mock keeps the backend's cost out of the comparison.
func orderAPI(name string, validate bool) string {
	v := ""
	if validate {
		v = `,"validate":{"body":` + orderSchema + `}`
	}
	return `{"name":"` + name + `","pool":"bench","route":{"method":"POST","path":"/` + name + `"},
	  "backend":{"type":"mock","status":200,"json":{"ok":true}},"concurrency":4096` + v + `}`
}

// runPost drives POST u with body from parallel goroutines, and reports
// the process's CPU time per call (cpu-us/op: client, edge, NATS and
// worker together, so a policy's added CPU is the difference of two runs).
func runPost(b *testing.B, u, body string) {
	c := benchsrv.Client()
	post := func() (int, error) {
		resp, err := c.Post(u, "application/json", strings.NewReader(body))
		if err != nil {
			return 0, err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, err
	}
	if code, err := post(); err != nil || code != http.StatusOK {
		b.Fatalf("POST %s before the run: %d %v", u, code, err)
	}
	b.ReportAllocs()
	b.SetParallelism(parallelism)
	b.ResetTimer()
	cpu0 := cpuTime()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if code, err := post(); err != nil || code != http.StatusOK {
				b.Errorf("POST %s: %d %v", u, code, err)
				return
			}
		}
	})
	cpu1 := cpuTime()
	b.StopTimer()
	if cpu0 > 0 {
		b.ReportMetric(float64(cpu1-cpu0)/float64(time.Microsecond)/float64(b.N), "cpu-us/op")
	}
	c.CloseIdleConnections()
}

// BenchmarkJetwayPost: a 1 KiB JSON POST through edge and worker to a
// mock backend, no policies: the baseline of BenchmarkJetwayValidate.
func BenchmarkJetwayPost(b *testing.B) {
	j := startJetway(b, orderAPI("orders", false))
	runPost(b, j.url+"/orders", orderBody)
}

// BenchmarkJetwayValidate: the same call with the whole body validated at
// the edge (orderSchema). Compare it with BenchmarkJetwayPost in one run.
func BenchmarkJetwayValidate(b *testing.B) {
	j := startJetway(b, orderAPI("orders.checked", true))
	runPost(b, j.url+"/orders.checked", orderBody)
}

// TestOrderBodyIsValid keeps the benchmark honest: its body is about 1 KiB
// and passes its schema, and a wrong one is refused.
func TestOrderBodyIsValid(t *testing.T) {
	if n := len(orderBody); n < 900 || n > 1200 {
		t.Fatalf("order body is %d bytes", n)
	}
	j := startJetway(t, orderAPI("orders.checked", true))
	for body, want := range map[string]int{orderBody: 200, strings.Replace(orderBody, `"EUR"`, `"XXX"`, 1): 400} {
		resp, err := http.Post(j.url+"/orders.checked", "application/json", bytes.NewReader([]byte(body)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("status %d, want %d", resp.StatusCode, want)
		}
	}
}

// BenchmarkJetwayPolicies: BenchmarkJetwayValidate's call with, also,
// the rewrites: two request headers set and a body field set and
// one removed (the body parsed once, for both).
func BenchmarkJetwayPolicies(b *testing.B) {
	doc := strings.Replace(orderAPI("orders.policies", true), `"concurrency":4096`, `"concurrency":4096,
	  "rewrite":{"request":{"headers":{"set":{"X-Tenant":"acme","X-Api-Version":"2"}},
	    "body":{"set":{"/source":"jetway"},"remove":["/note"]}}}`, 1)
	j := startJetway(b, doc)
	runPost(b, j.url+"/orders.policies", orderBody)
}

// BenchmarkJetwayCached: the GET of BenchmarkJetway answered from the
// edge's response cache (every call after the first is a hit). Compare it
// with BenchmarkJetway in one run: the target is at least 2x.
func BenchmarkJetwayCached(b *testing.B) {
	be := backend(b)
	j := startJetway(b, `{"name":"bench.cached","pool":"bench","route":{"method":"GET","path":"/hello-cached"},
	  "backend":{"type":"http","url":"`+be.URL+`/hello"},"concurrency":4096,"cache":{"ttl":"1h"}}`)
	runParallel(b, j.url+"/hello-cached")
}
