package edge_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/jetway-gw/jetway/registry"
)

// ecJWKS writes a JWKS file with one P-256 key (kid k1) and returns its path.
func ecJWKS(t *testing.T, k *ecdsa.PrivateKey) string {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"keys": []map[string]string{{"kty": "EC", "kid": "k1", "crv": "P-256",
		"x": b64u(k.X.FillBytes(make([]byte, 32))), "y": b64u(k.Y.FillBytes(make([]byte, 32)))}}})
	f := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(f, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func es256(t *testing.T, k *ecdsa.PrivateKey, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, claims)
	tok.Header["kid"] = "k1"
	s, err := tok.SignedString(k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestAppOwnIssuer: an app may bring its own token issuer. Its tokens are
// checked with its keys only, are always that app's (they cannot name
// another), and work on every API that accepts jwt, also one with no
// issuer settings of its own.
func TestAppOwnIssuer(t *testing.T) {
	apiKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	partnerKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Header.Get("X-Jetway-App"))
	}))
	defer backend.Close()
	g := newGateway(t)
	const partnerIss, apiIss = "https://idp.partner.example", "https://id.example.com"
	partner := &registry.App{ID: "partner", Status: registry.AppActive, APIs: []string{"*"},
		JWT: &registry.JWTAuth{Issuer: partnerIss, Audience: "jetway", Algorithms: []string{"ES256"}, JWKSFile: ecJWKS(t, partnerKey)}}
	g.PutApps(partner, &registry.App{ID: "shop", Status: registry.AppActive, APIs: []string{"*"}})
	g.Publish(`{"name":"withapi","pool":"p","route":{"path":"/withapi"},"backend":{"type":"http","url":"` + backend.URL + `"},
		"auth":{"methods":["jwt"],"jwt":{"issuer":"` + apiIss + `","algorithms":["ES256"],"jwks_file":"` + ecJWKS(t, apiKey) + `"}}}`)
	g.Publish(`{"name":"appsonly","pool":"p","route":{"path":"/appsonly"},"backend":{"type":"http","url":"` + backend.URL + `"},
		"auth":{"methods":["jwt"]}}`)

	exp := time.Now().Add(time.Hour).Unix()
	partnerTok := es256(t, partnerKey, jwt.MapClaims{"iss": partnerIss, "aud": "jetway", "sub": "shop", "exp": exp})
	for _, tc := range []struct {
		name, path, token string
		status            int
		app               string
	}{
		{"the app's token, on an API with its own issuer", "/withapi", partnerTok, 200, "partner"},
		{"the app's token, on an API with none", "/appsonly", partnerTok, 200, "partner"},
		{"the API issuer's token", "/withapi", es256(t, apiKey, jwt.MapClaims{"iss": apiIss, "sub": "shop", "exp": exp}), 200, "shop"},
		{"the API issuer's token where there is none", "/appsonly", es256(t, apiKey, jwt.MapClaims{"iss": apiIss, "sub": "shop", "exp": exp}), 401, ""},
		{"the app's issuer, signed with another key", "/withapi", es256(t, apiKey, jwt.MapClaims{"iss": partnerIss, "aud": "jetway", "sub": "partner", "exp": exp}), 401, ""},
		{"the app's issuer, wrong audience", "/appsonly", es256(t, partnerKey, jwt.MapClaims{"iss": partnerIss, "aud": "other", "exp": exp}), 401, ""},
		{"the app's issuer, expired", "/appsonly", es256(t, partnerKey, jwt.MapClaims{"iss": partnerIss, "aud": "jetway", "exp": time.Now().Add(-time.Hour).Unix()}), 401, ""},
		{"an unknown issuer", "/appsonly", es256(t, partnerKey, jwt.MapClaims{"iss": "https://evil.example", "aud": "jetway", "exp": exp}), 401, ""},
	} {
		r := g.Do("GET", tc.path, nil, "Authorization", "Bearer "+tc.token)
		if r.Status != tc.status || (tc.status == 200 && r.Body != tc.app) {
			t.Errorf("%s: %d %q, want %d %q", tc.name, r.Status, r.Body, tc.status, tc.app)
		}
	}

	// A disabled app's tokens fail at once, cached or not.
	disabled := *partner
	disabled.Status = registry.AppDisabled
	g.PutApps(&disabled)
	if r := g.Do("GET", "/appsonly", nil, "Authorization", "Bearer "+partnerTok); r.Status != 401 {
		t.Errorf("disabled app's token: %d %s", r.Status, r.Body)
	}
	// Two apps naming one issuer: neither gets its tokens.
	g.PutApps(partner, &registry.App{ID: "copycat", Status: registry.AppActive, APIs: []string{"*"}, JWT: partner.JWT})
	if r := g.Do("GET", "/appsonly", nil, "Authorization", "Bearer "+partnerTok); r.Status != 401 {
		t.Errorf("issuer shared by two apps: %d %s", r.Status, r.Body)
	}
	g.PutApps(&registry.App{ID: "copycat", Status: registry.AppActive, APIs: []string{"*"}})
	if r := g.Do("GET", "/appsonly", nil, "Authorization", "Bearer "+partnerTok); r.Status != 200 || r.Body != "partner" {
		t.Errorf("once the issuer is the partner's alone again: %d %s", r.Status, r.Body)
	}
}
