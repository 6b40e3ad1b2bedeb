package bench

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/edge"
	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/sign"
)

// authBench is an edge with no worker whose API answers from its degrade
// switch right after the edge's policies, and a way to make a request that
// its auth admits.
type authBench struct {
	edge *edge.Edge
	req  func() *http.Request
}

func newAuthBench(b *testing.B, method string) authBench {
	ns := natstest.RunServer(b)
	nc := natstest.Connect(b, ns)
	doc := `{"name":"bench.auth","pool":"bench","route":{"method":"POST","path":"/edge"},"backend":{"type":"mock","status":200}`
	app := &registry.App{ID: "bench", Status: registry.AppActive, APIs: []string{"bench.*"}}
	var req func() *http.Request
	plain := func() *http.Request { return httptest.NewRequest(http.MethodPost, "/edge", strings.NewReader("{}")) }
	switch method {
	case "none":
		req = plain
	case "key":
		key, rec, _ := registry.NewAPIKey()
		app.Keys = []registry.AppKey{rec}
		doc += `,"auth":{"methods":["key"]}`
		req = func() *http.Request { r := plain(); r.Header.Set("X-Api-Key", key); return r }
	case "hmac":
		sec, _ := registry.NewHMACSecret()
		app.HMACSecrets = []registry.HMACSecret{sec}
		doc += `,"auth":{"methods":["hmac"]}`
		req = func() *http.Request {
			r := plain()
			if err := sign.Sign(r, []byte("{}"), "bench", sec.Bytes()); err != nil {
				b.Fatal(err)
			}
			return r
		}
	case "jwt", "jwt-cached":
		k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		enc := func(x []byte) string { return base64.RawURLEncoding.EncodeToString(x) }
		jwks, _ := json.Marshal(map[string]any{"keys": []map[string]string{{"kty": "EC", "kid": "e1", "crv": "P-256",
			"x": enc(k.X.FillBytes(make([]byte, 32))), "y": enc(k.Y.FillBytes(make([]byte, 32)))}}})
		file := filepath.Join(b.TempDir(), "jwks.json")
		os.WriteFile(file, jwks, 0o600)
		doc += `,"auth":{"methods":["jwt"],"jwt":{"algorithms":["ES256"],"jwks_file":"` + file + `"}}`
		// jwt: a token of its own for each request (signed here, before
		// the timer), so each pays the signature check, as distinct
		// clients would; jwt-cached: one token throughout, checked once.
		tokens := make([]string, 1)
		if method == "jwt" {
			tokens = make([]string, b.N+1) // and newAuthBench's own request
		}
		for i := range tokens {
			tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"sub": "bench", "exp": time.Now().Add(time.Hour).Unix(), "jti": strconv.Itoa(i)})
			tok.Header["kid"] = "e1"
			tokens[i], _ = tok.SignedString(k)
		}
		next := 0
		req = func() *http.Request {
			r := plain()
			r.Header.Set("Authorization", "Bearer "+tokens[next%len(tokens)])
			next++
			return r
		}
	}
	a, err := registry.ParseAPI("", []byte(doc+`}`))
	if err != nil {
		b.Fatal(err)
	}
	e, err := edge.New(edge.Options{Conn: nc, Logger: quiet, Nonces: registry.NewNonceStore(nc, registry.BucketOptions{})})
	if err != nil {
		b.Fatal(err)
	}
	body := `{"ok":true}`
	e.Apply(&registry.Snapshot{
		APIs:    map[string]*registry.API{a.Name: a},
		Degrade: map[string]*registry.Degrade{a.Name: {On: true, API: a.Name, Static: registry.Static{Status: 200, Body: &body}}},
		Apps:    map[string]*registry.App{app.ID: app},
	})
	w := httptest.NewRecorder()
	e.ServeHTTP(w, req())
	if w.Code != http.StatusOK {
		b.Fatalf("%s: edge answered %d %q", method, w.Code, w.Body)
	}
	return authBench{edge: e, req: req}
}

// BenchmarkEdgeAuth measures what each authentication method adds to the
// edge's handling of a request (one goroutine, no network but the nonce
// store's NATS round trip for hmac), alternating blocks of 256 requests
// with an open API, as BenchmarkEdgeRateLimit does; auth-ns is the
// difference per request. jwt sends a new token with each request (the
// signature check every time), jwt-cached the same one (the edge's cache of
// verified tokens answers).
//
//	go test -run '^$' -bench EdgeAuth -count=3 -benchmem ./bench/
func BenchmarkEdgeAuth(b *testing.B) {
	for _, method := range []string{"key", "jwt", "jwt-cached", "hmac"} {
		b.Run(method, func(b *testing.B) {
			open, auth := newAuthBench(b, "none"), newAuthBench(b, method)
			compareHandlers(b, open.edge, open.req, auth.edge, auth.req, "open-ns", "auth-total-ns", "auth-ns")
		})
	}
}
