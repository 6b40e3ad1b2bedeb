package push_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/jetway-gw/jetway/push/pushclient"
	"github.com/jetway-gw/jetway/registry"
)

// An app's own issuer signs its users' tokens: a client connected with one
// gets the messages to=user for its token's subject, not another user's;
// and its connection ends when the token expires.
func TestUserAddressingAndTokenExpiry(t *testing.T) {
	g, pub, _ := start(t)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	b64 := base64.RawURLEncoding.EncodeToString
	jwks, _ := json.Marshal(map[string]any{"keys": []map[string]string{{"kty": "EC", "kid": "k1", "crv": "P-256",
		"x": b64(key.X.FillBytes(make([]byte, 32))), "y": b64(key.Y.FillBytes(make([]byte, 32)))}}})
	f := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(f, jwks, 0o600); err != nil {
		t.Fatal(err)
	}
	const iss = "https://id.shop.example"
	g.PutApps(&registry.App{ID: "shop", Status: registry.AppActive, APIs: []string{"*"},
		JWT: &registry.JWTAuth{Issuer: iss, Algorithms: []string{"ES256"}, JWKSFile: f}})
	g.PutTopic(`{"name":"orders","publish":["pub"],"subscribe":["*"],"auth":{"methods":["key","jwt"]}}`)
	token := func(sub string, exp time.Time) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"iss": iss, "sub": sub, "exp": exp.Unix()})
		tok.Header["kid"] = "k1"
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	dial := func(tok string) *pushclient.Conn {
		c, err := pushclient.Dial(ctx, pushclient.Options{Edge: g.URL, Topic: "orders", Transport: "ws", Header: http.Header{"Authorization": {"Bearer " + tok}}})
		if err != nil {
			t.Fatal(err)
		}
		if ev, err := c.Next(ctx); err != nil || ev.Type != "ready" {
			t.Fatalf("%+v %v", ev, err)
		}
		return c
	}
	alice := dial(token("alice", time.Now().Add(time.Hour)))
	defer alice.Close()
	publish(t, g, pub, "?to=user&app=shop&user=bob", "for bob")
	publish(t, g, pub, "?to=user&app=other&user=alice", "for another app's alice")
	publish(t, g, pub, "?to=user&app=shop&user=alice", "for alice")
	if ev := next(t, alice); ev.Data != "for alice" {
		t.Fatalf("alice got %+v", ev)
	}
	for _, bad := range []string{"?to=user&app=shop", "?to=user&app=shop&user=a&device=d", "?to=device&app=shop&device=d&user=a"} {
		if r := g.Do("POST", "/_jetway/publish/orders"+bad, strings.NewReader("x"), "X-Api-Key", pub); r.Status != 400 {
			t.Errorf("%s: %d %s", bad, r.Status, r.Body)
		}
	}
	// A token that expires in a second: the connection ends then, with why.
	brief := dial(token("carol", time.Now().Add(time.Second)))
	defer brief.Close()
	var ev pushclient.Event
	var err error
	for err == nil {
		ev, err = brief.Next(ctx)
	}
	var ce *pushclient.CloseError
	if !errors.As(err, &ce) || ce.Code != 4001 || !strings.Contains(ce.Reason, "expired") {
		t.Fatalf("an expired token's connection: %+v %v", ev, err)
	}
}
