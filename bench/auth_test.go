package bench

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/edge"
	"github.com/jetway-gw/jetway/registry"
)

// authEdge is an edge with no worker whose API answers from its degrade
// switch right after the edge's policies, with or without key auth.
func authEdge(b *testing.B, withAuth bool) (*edge.Edge, string) {
	doc := `{"name":"bench.auth","pool":"bench","route":{"method":"GET","path":"/edge"},"backend":{"type":"mock","status":200}`
	if withAuth {
		doc += `,"auth":{"methods":["key"]}`
	}
	a, err := registry.ParseAPI("", []byte(doc+`}`))
	if err != nil {
		b.Fatal(err)
	}
	key, rec, err := registry.NewAPIKey()
	if err != nil {
		b.Fatal(err)
	}
	e, err := edge.New(edge.Options{Conn: natstest.Connect(b, natstest.RunServer(b)), Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	body := `{"ok":true}`
	e.Apply(&registry.Snapshot{
		APIs:    map[string]*registry.API{a.Name: a},
		Degrade: map[string]*registry.Degrade{a.Name: {On: true, API: a.Name, Static: registry.Static{Status: 200, Body: &body}}},
		Apps:    map[string]*registry.App{"bench": {ID: "bench", Status: registry.AppActive, Keys: []registry.AppKey{rec}, APIs: []string{"bench.*"}}},
	})
	w := httptest.NewRecorder()
	e.ServeHTTP(w, authRequest(key))
	if w.Code != http.StatusOK {
		b.Fatalf("edge answered %d %q", w.Code, w.Body)
	}
	return e, key
}

func authRequest(key string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/edge", nil)
	r.Header.Set("X-Api-Key", key)
	return r
}

// BenchmarkEdgeAuth measures what API-key authentication adds to the
// edge's handling of a request (one goroutine, no network), alternating
// blocks of 256 requests between an open API and a keyed one, as
// BenchmarkEdgeRateLimit does. auth-ns is the difference per request.
//
//	go test -run '^$' -bench EdgeAuth -count=5 -benchmem ./bench/
func BenchmarkEdgeAuth(b *testing.B) {
	open, _ := authEdge(b, false)
	keyed, key := authEdge(b, true)
	const block = 256
	var tOpen, tKeyed time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += block {
		n := min(block, b.N-done)
		t0 := time.Now()
		for range n {
			open.ServeHTTP(httptest.NewRecorder(), authRequest(key))
		}
		t1 := time.Now()
		for range n {
			keyed.ServeHTTP(httptest.NewRecorder(), authRequest(key))
		}
		tKeyed += time.Since(t1)
		tOpen += t1.Sub(t0)
	}
	b.StopTimer()
	b.ReportMetric(float64(tOpen)/float64(b.N), "open-ns")
	b.ReportMetric(float64(tKeyed)/float64(b.N), "key-ns")
	b.ReportMetric(float64(tKeyed-tOpen)/float64(b.N), "auth-ns")
}
