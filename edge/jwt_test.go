package edge_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/registry"
)

func b64u(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func TestJWTAuth(t *testing.T) {
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	edPub, edPriv, _ := ed25519.GenerateKey(rand.Reader)
	hmacSecret := make([]byte, 32)
	rand.Read(hmacSecret)
	jwks := map[string]any{"keys": []map[string]string{
		{"kty": "RSA", "kid": "rsa1", "n": b64u(rsaKey.N.Bytes()), "e": b64u(big.NewInt(int64(rsaKey.E)).Bytes())},
		{"kty": "EC", "kid": "ec1", "crv": "P-256", "x": b64u(ecKey.X.FillBytes(make([]byte, 32))), "y": b64u(ecKey.Y.FillBytes(make([]byte, 32)))},
		{"kty": "OKP", "kid": "ed1", "crv": "Ed25519", "x": b64u(edPub)},
		{"kty": "oct", "kid": "hs1", "k": b64u(hmacSecret)},
	}}
	file := filepath.Join(t.TempDir(), "jwks.json")
	b, _ := json.Marshal(jwks)
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}

	g := newGateway(t)
	ctx := context.Background()
	for _, a := range []*registry.App{
		{ID: "shop", Status: registry.AppActive, APIs: []string{"tok.*"}},
		{ID: "stranger", Status: registry.AppActive, APIs: []string{"other.*"}},
	} {
		if _, err := g.Client.PutApp(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	natstest.CheckFor(t, 2*time.Second, 2*time.Millisecond, func() error {
		if len(g.EdgeWatcher.Current().Apps) != 2 {
			return fmt.Errorf("apps not loaded")
		}
		return nil
	})
	g.Publish(`{"name":"tok.get","pool":"p","route":{"path":"/tok"},"backend":{"type":"mock","body":"in"},
		"auth":{"methods":["jwt"],"jwt":{"issuer":"https://id.test","audience":"orders","algorithms":["RS256","ES256","EdDSA","HS256"],"jwks_file":"` + file + `","leeway":"5s"}}}`)

	now := time.Now()
	claims := func(mod func(jwt.MapClaims)) jwt.MapClaims {
		c := jwt.MapClaims{"iss": "https://id.test", "aud": "orders", "sub": "shop", "exp": now.Add(time.Minute).Unix(), "iat": now.Unix()}
		if mod != nil {
			mod(c)
		}
		return c
	}
	sign := func(m jwt.SigningMethod, kid string, key any, c jwt.MapClaims) string {
		tok := jwt.NewWithClaims(m, c)
		if kid != "" {
			tok.Header["kid"] = kid
		}
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: must(x509.MarshalPKIXPublicKey(&rsaKey.PublicKey))})
	unsigned := func() string {
		s, _ := jwt.NewWithClaims(jwt.SigningMethodNone, claims(nil)).SignedString(jwt.UnsafeAllowNoneSignatureType)
		return s
	}()
	for _, tc := range []struct {
		name   string
		token  string
		status int
	}{
		{"RS256", sign(jwt.SigningMethodRS256, "rsa1", rsaKey, claims(nil)), 200},
		{"ES256", sign(jwt.SigningMethodES256, "ec1", ecKey, claims(nil)), 200},
		{"EdDSA", sign(jwt.SigningMethodEdDSA, "ed1", edPriv, claims(nil)), 200},
		{"HS256", sign(jwt.SigningMethodHS256, "hs1", hmacSecret, claims(nil)), 200},
		{"expired", sign(jwt.SigningMethodRS256, "rsa1", rsaKey, claims(func(c jwt.MapClaims) { c["exp"] = now.Add(-time.Minute).Unix() })), 401},
		{"no exp", sign(jwt.SigningMethodRS256, "rsa1", rsaKey, claims(func(c jwt.MapClaims) { delete(c, "exp") })), 401},
		{"not yet valid", sign(jwt.SigningMethodRS256, "rsa1", rsaKey, claims(func(c jwt.MapClaims) { c["nbf"] = now.Add(time.Minute).Unix() })), 401},
		{"wrong issuer", sign(jwt.SigningMethodRS256, "rsa1", rsaKey, claims(func(c jwt.MapClaims) { c["iss"] = "https://evil" })), 401},
		{"wrong audience", sign(jwt.SigningMethodRS256, "rsa1", rsaKey, claims(func(c jwt.MapClaims) { c["aud"] = "users" })), 401},
		{"alg none", unsigned, 401},
		{"alg not allowed", sign(jwt.SigningMethodRS512, "rsa1", rsaKey, claims(nil)), 401},
		{"HS256 with the RSA public key", sign(jwt.SigningMethodHS256, "rsa1", pubPEM, claims(nil)), 401},
		{"unknown kid", sign(jwt.SigningMethodRS256, "nope", rsaKey, claims(nil)), 401},
		{"forged signature", sign(jwt.SigningMethodRS256, "rsa1", rsaKey, claims(nil))[:60] + "x" + sign(jwt.SigningMethodRS256, "rsa1", rsaKey, claims(nil))[61:], 401},
		{"garbage", "not.a.token", 401},
		{"unknown app", sign(jwt.SigningMethodRS256, "rsa1", rsaKey, claims(func(c jwt.MapClaims) { c["sub"] = "ghost" })), 401},
		{"app not granted", sign(jwt.SigningMethodRS256, "rsa1", rsaKey, claims(func(c jwt.MapClaims) { c["sub"] = "stranger" })), 403},
	} {
		r := g.Do("GET", "/tok", nil, "Authorization", "Bearer "+tc.token)
		if r.Status != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.name, r.Status, r.Body, tc.status)
		}
		if tc.status == 401 && r.Code != "UNAUTHENTICATED" || tc.status == 500 {
			t.Errorf("%s: code %q", tc.name, r.Code)
		}
	}
	if r := g.Do("GET", "/tok", nil); r.Status != 401 || !strings.Contains(r.Body, "jwt") {
		t.Errorf("no credentials: %d %s", r.Status, r.Body)
	}
	// The scheme name is case-insensitive, with one or more spaces after
	// it (RFC 7235 §2.1); a token with a crit header is refused.
	good := sign(jwt.SigningMethodES256, "ec1", ecKey, claims(nil))
	for _, authz := range []string{"bearer " + good, "BEARER " + good, "bEaReR " + good, "Bearer   " + good} {
		if r := g.Do("GET", "/tok", nil, "Authorization", authz); r.Status != 200 {
			t.Errorf("%.12q…: %d %s", authz, r.Status, r.Body)
		}
	}
	for _, authz := range []string{"Bearer" + good, "Bearer\t" + good, "Bearerx " + good} {
		if r := g.Do("GET", "/tok", nil, "Authorization", authz); r.Status != 401 {
			t.Errorf("%.12q…: %d %s", authz, r.Status, r.Body)
		}
	}
	crit := jwt.NewWithClaims(jwt.SigningMethodES256, claims(nil))
	crit.Header["kid"], crit.Header["crit"], crit.Header["b64"] = "ec1", []string{"b64"}, true
	critTok, err := crit.SignedString(ecKey)
	if err != nil {
		t.Fatal(err)
	}
	if r := g.Do("GET", "/tok", nil, "Authorization", "Bearer "+critTok); r.Status != 401 || r.Code != "UNAUTHENTICATED" || !strings.Contains(r.Body, "crit") {
		t.Errorf("crit header: %d %s", r.Status, r.Body)
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// Keys from a JWKS URL are fetched in the background; tokens verify once
// they arrive, and a JWKS server that fails keeps the keys already had.
func TestJWTFromJWKSURL(t *testing.T) {
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	jwks, _ := json.Marshal(map[string]any{"keys": []map[string]string{
		{"kty": "RSA", "kid": "r1", "use": "sig", "n": b64u(rsaKey.N.Bytes()), "e": b64u(big.NewInt(int64(rsaKey.E)).Bytes())},
	}})
	var fetches atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		w.Write(jwks)
	}))
	defer srv.Close()
	g := newGateway(t)
	if _, err := g.Client.PutApp(context.Background(), &registry.App{ID: "shop", Status: registry.AppActive, APIs: []string{"*"}}); err != nil {
		t.Fatal(err)
	}
	g.Publish(`{"name":"tokurl","pool":"p","route":{"path":"/tokurl"},"backend":{"type":"mock","body":"in"},
		"auth":{"methods":["jwt"],"jwt":{"algorithms":["RS256"],"jwks_url":"` + srv.URL + `"}}}`)
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"sub": "shop", "exp": time.Now().Add(time.Minute).Unix()})
	tok.Header["kid"] = "r1"
	signed, err := tok.SignedString(rsaKey)
	if err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 5*time.Second, 20*time.Millisecond, func() error {
		if r := g.Do("GET", "/tokurl", nil, "Authorization", "Bearer "+signed); r.Status != 200 {
			return fmt.Errorf("%d %s", r.Status, r.Body)
		}
		return nil
	})
	if n := fetches.Load(); n < 1 || n > 3 {
		t.Errorf("%d JWKS fetches for a handful of calls", n)
	}
	// An unrelated registry change keeps the verifier, its keys and its
	// cache: no refetch, and no moment without keys (which would be 401s).
	before := fetches.Load()
	g.Publish(`{"name":"other","pool":"p","route":{"path":"/other"},"backend":{"type":"mock"}}`)
	if r := g.Do("GET", "/tokurl", nil, "Authorization", "Bearer "+signed); r.Status != 200 {
		t.Fatalf("right after an unrelated change: %d %s", r.Status, r.Body)
	}
	if n := fetches.Load(); n != before {
		t.Errorf("an unrelated registry change refetched the JWKS (%d → %d fetches)", before, n)
	}
}
