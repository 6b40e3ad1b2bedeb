package push_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/jetway-gw/jetway/internal/jetwaytest"
	"github.com/jetway-gw/jetway/push/pushclient"
	"github.com/jetway-gw/jetway/registry"
)

// An app's own issuer signs its users' tokens: a client connected with one
// gets the messages to=user for its token's subject, not another user's;
// and its connection ends when the token expires.
func TestUserAddressingAndTokenExpiry(t *testing.T) {
	g, pub, _ := start(t)
	token, _ := shopIssuer(t, g)
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
	waitMetric(t, g.Push, disconnects("expired"), 1)
}

// shopIssuer makes app shop with an issuer of its own, a topic that takes
// its tokens, and returns a token maker and the app as stored.
func shopIssuer(t *testing.T, g *jetwaytest.Gateway) (token func(sub string, exp time.Time) string, app *registry.App) {
	t.Helper()
	issuer := jetwaytest.NewIssuer(t, "https://id.shop.example")
	app = &registry.App{ID: "shop", Status: registry.AppActive, APIs: []string{"*"},
		JWT: &registry.JWTAuth{Issuer: issuer.Iss, Algorithms: []string{"ES256"}, JWKSFile: issuer.File}}
	g.PutApps(app)
	g.PutTopic(`{"name":"orders","publish":["pub"],"subscribe":["*"],"auth":{"methods":["key","jwt"]}}`)
	return func(sub string, exp time.Time) string {
		return issuer.Token(jwt.MapClaims{"sub": sub, "exp": exp.Unix()})
	}, app
}

// A token connection ends when the registry stops accepting its token
// (its app's issuer removed), as a key connection does when its key goes.
func TestTokenConnectionEndsWithItsIssuer(t *testing.T) {
	g, pub, _ := start(t)
	token, app := shopIssuer(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pushclient.Dial(ctx, pushclient.Options{Edge: g.URL, Topic: "orders", Transport: "ws", Header: http.Header{"Authorization": {"Bearer " + token("alice", time.Now().Add(time.Hour))}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if ev, err := c.Next(ctx); err != nil || ev.Type != "ready" {
		t.Fatalf("%+v %v", ev, err)
	}
	off := *app
	off.JWT = nil
	g.PutApps(&off)
	publish(t, g, pub, "?to=user&app=shop&user=alice", "for alice")
	for {
		ev, err := c.Next(ctx)
		var ce *pushclient.CloseError
		if errors.As(err, &ce) && ce.Code == 4001 && strings.Contains(ce.Reason, "no longer accepted") {
			return
		}
		if err != nil || ev.Type == "message" {
			t.Fatalf("the connection of a token no longer accepted: %+v %v", ev, err)
		}
	}
}

// A token that expires after 2262 (UnixNano's end) never ends its
// connection early; one already expired (within the verifier's leeway) is
// refused a connection.
func TestTokenExpiryBounds(t *testing.T) {
	g, _, _ := start(t)
	token, _ := shopIssuer(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	far := token("alice", time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC))
	c, err := pushclient.Dial(ctx, pushclient.Options{Edge: g.URL, Topic: "orders", Transport: "ws", Header: http.Header{"Authorization": {"Bearer " + far}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if ev, err := c.Next(ctx); err != nil || ev.Type != "ready" {
		t.Fatalf("%+v %v", ev, err)
	}
	time.Sleep(2500 * time.Millisecond) // two janitor rounds
	if st := g.Push.Stats(); st.Connections != 1 {
		t.Errorf("a token good until 2300 was cut: %+v", st)
	}
	r := g.Do("GET", "/_jetway/sse/orders?from=0", nil, "Authorization", "Bearer "+token("bob", time.Now().Add(-5*time.Second)))
	if r.Status != 401 {
		t.Errorf("an expired token: %d %s", r.Status, r.Body)
	}
}

// A token connection takes a fresh token over the connection and lives on
// past the old one's expiry; a fresh token of another user, or one the
// issuer did not sign, closes it with 1008 and why.
func TestTokenRefreshOverTheConnection(t *testing.T) {
	g, pub, _ := start(t)
	token, _ := shopIssuer(t, g)
	tcp := jetwaytest.ServeTCP(t, g.Edge)
	for _, transport := range []string{"ws", "tcp"} {
		t.Run(transport, func(t *testing.T) {
			edgeURL := g.URL
			if transport == "tcp" {
				edgeURL = tcp
			}
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			dial := func(exp time.Time) *pushclient.Conn {
				c, err := pushclient.Dial(ctx, pushclient.Options{Edge: edgeURL, Topic: "orders", Transport: transport, Header: http.Header{"Authorization": {"Bearer " + token("alice", exp)}}})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = c.Close() })
				if ev, err := c.Next(ctx); err != nil || ev.Type != "ready" {
					t.Fatalf("%+v %v", ev, err)
				}
				return c
			}
			c := dial(time.Now().Add(2 * time.Second))
			if err := c.Refresh(ctx, token("alice", time.Now().Add(time.Hour))); err != nil {
				t.Fatal(err)
			}
			time.Sleep(3500 * time.Millisecond) // past the first token's expiry, and a janitor round
			cursor := publish(t, g, pub, "?to=user&app=shop&user=alice", "still here")
			if ev := next(t, c); ev.Cursor != cursor {
				t.Fatalf("after the refresh: %+v", ev)
			}
			for _, bad := range []struct{ name, token string }{
				{"another user", token("bob", time.Now().Add(time.Hour))},
				{"not a token", "x.y.z"},
				{"expired", token("alice", time.Now().Add(-time.Hour))},
			} {
				c := dial(time.Now().Add(time.Hour))
				if err := c.Refresh(ctx, bad.token); err != nil {
					t.Fatal(err)
				}
				var err error
				for err == nil {
					_, err = c.Next(ctx)
				}
				var ce *pushclient.CloseError
				if !errors.As(err, &ce) || ce.Code != 1008 || !strings.Contains(ce.Reason, "token") {
					t.Errorf("%s: %v", bad.name, err)
				}
			}
		})
	}
	// A key connection has no token to refresh.
	c, err := pushclient.Dial(context.Background(), pushclient.Options{Edge: g.URL, Topic: "orders", Transport: "ws", Header: http.Header{"X-Api-Key": {pub}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Refresh(ctx, token("alice", time.Now().Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	for err == nil {
		_, err = c.Next(ctx)
	}
	var ce *pushclient.CloseError
	if !errors.As(err, &ce) || ce.Code != 1008 || !strings.Contains(ce.Reason, "not made with a token") {
		t.Errorf("a key connection's refresh: %v", err)
	}
}
