package workers_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/jetway-gw/jetway/internal/jetwaytest"
	"github.com/jetway-gw/jetway/registry"
)

// With tokens, one app's users do not share jobs: only the token's
// subject that submitted a job reads it, and the same Idempotency-Key of
// two users makes two jobs.
func TestAsyncJobsAreTheirUsersOnly(t *testing.T) {
	g := jetwaytest.Start(t)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	b64 := base64.RawURLEncoding.EncodeToString
	jwks, _ := json.Marshal(map[string]any{"keys": []map[string]string{{"kty": "EC", "kid": "k1", "crv": "P-256",
		"x": b64(key.X.FillBytes(make([]byte, 32))), "y": b64(key.Y.FillBytes(make([]byte, 32)))}}})
	f := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(f, jwks, 0o600); err != nil {
		t.Fatal(err)
	}
	const iss = "https://id.shop.example"
	apiKey, rec, _ := registry.NewAPIKey()
	g.PutApps(&registry.App{ID: "shop", Status: registry.AppActive, APIs: []string{"*"}, Keys: []registry.AppKey{rec},
		JWT: &registry.JWTAuth{Issuer: iss, Algorithms: []string{"ES256"}, JWKSFile: f}})
	token := func(sub string) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"iss": iss, "sub": sub, "exp": time.Now().Add(time.Hour).Unix()})
		tok.Header["kid"] = "k1"
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return "Bearer " + s
	}
	b := newJobBackend(t, 200)
	g.Publish(asyncAPI("mine", b, `{}`, `,"auth":{"methods":["jwt","key"]}`))

	locA, idA := submit(t, g, "/mine", "x", "Authorization", token("alice"), "Idempotency-Key", "k1")
	st := waitJob(t, g, locA, registry.JobSucceeded, "Authorization", token("alice"))
	if st.User != "alice" || st.App != "shop" {
		t.Fatalf("status %+v", st)
	}
	for name, hdr := range map[string][]string{
		"another user of the app": {"Authorization", token("bob")},
		"the app's key":           {"X-Api-Key", apiKey},
	} {
		if r := g.Do("GET", locA, nil, hdr...); r.Status != 404 || r.Code != "JOB_NOT_FOUND" {
			t.Errorf("%s read alice's job: %d %s", name, r.Status, r.Body)
		}
	}
	if r := g.Do("DELETE", locA, nil, "Authorization", token("bob")); r.Status != 404 {
		t.Errorf("bob cancelled alice's job: %d %s", r.Status, r.Body)
	}
	_, idB := submit(t, g, "/mine", "x", "Authorization", token("bob"), "Idempotency-Key", "k1")
	if idB == idA || !strings.HasPrefix(idB, "jobs.") {
		t.Fatalf("bob's key k1 found alice's job: %s %s", idA, idB)
	}
}
