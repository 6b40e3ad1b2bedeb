package workers_test

import (
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
	issuer := jetwaytest.NewIssuer(t, "https://id.shop.example")
	apiKey, rec, _ := registry.NewAPIKey()
	g.PutApps(&registry.App{ID: "shop", Status: registry.AppActive, APIs: []string{"*"}, Keys: []registry.AppKey{rec},
		JWT: &registry.JWTAuth{Issuer: issuer.Iss, Algorithms: []string{"ES256"}, JWKSFile: issuer.File}})
	token := func(sub string) string {
		return "Bearer " + issuer.Token(jwt.MapClaims{"sub": sub, "exp": time.Now().Add(time.Hour).Unix()})
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
