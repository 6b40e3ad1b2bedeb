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

// A topic may name its users by another claim than sub (user_claim): a
// client is the user its token's claim says — messages to=user for it
// reach it, for its sub do not — a fresh token must name the same user,
// and a change of the claim ends the topic's token connections.
func TestUserClaimOfATopic(t *testing.T) {
	g, pub, _ := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, bad := range []string{`"a b"`, `""`, `"uid?x"`, `7`} {
		if _, err := g.Client.PutTopic(ctx, []byte(`{"name":"users","subscribe":["*"],"user_claim":`+bad+`}`)); err == nil || !strings.Contains(err.Error(), "user_claim") {
			t.Errorf("user_claim %s: %v", bad, err)
		}
	}
	g.PutTopic(`{"name":"users","subscribe":["*"],"user_claim":"https://shop.example/uid"}`)

	issuer := jetwaytest.NewIssuer(t, "https://id.shop.example")
	g.PutApps(&registry.App{ID: "shop", Status: registry.AppActive, APIs: []string{"*"},
		JWT: &registry.JWTAuth{Issuer: issuer.Iss, Algorithms: []string{"ES256"}, JWKSFile: issuer.File}})
	topicDoc := func(claim string) string {
		return `{"name":"orders","publish":["pub"],"subscribe":["*"],"auth":{"methods":["key","jwt"]},"user_claim":"` + claim + `"}`
	}
	g.PutTopic(topicDoc("uid"))
	token := func(sub, uid string) string {
		return issuer.Token(jwt.MapClaims{"sub": sub, "uid": uid, "exp": time.Now().Add(time.Hour).Unix()})
	}
	c, err := pushclient.Dial(ctx, pushclient.Options{Edge: g.URL, Topic: "orders", Transport: "ws", Header: http.Header{"Authorization": {"Bearer " + token("s-alice", "alice")}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if ev, err := c.Next(ctx); err != nil || ev.Type != "ready" {
		t.Fatalf("%+v %v", ev, err)
	}
	if conns := g.Push.Connections("shop", 0); len(conns) != 1 || conns[0].User != "alice" {
		t.Fatalf("listed %+v, want user alice", conns)
	}
	publish(t, g, pub, "?to=user&app=shop&user=s-alice", "to its sub")
	mine := publish(t, g, pub, "?to=user&app=shop&user=alice", "to its uid")
	if ev := next(t, c); ev.Cursor != mine {
		t.Fatalf("got %+v, want the message to its uid", ev)
	}
	// A fresh token of the same uid (another sub) is taken.
	if err := c.Refresh(ctx, token("s-other", "alice")); err != nil {
		t.Fatal(err)
	}
	again := publish(t, g, pub, "?to=user&app=shop&user=alice", "after the refresh")
	if ev := next(t, c); ev.Cursor != again {
		t.Fatalf("after the refresh: %+v", ev)
	}
	// The topic names its users by sub now: the token connection ends.
	g.PutTopic(topicDoc("sub"))
	_, err = c.Next(ctx)
	var ce *pushclient.CloseError
	if !errors.As(err, &ce) || ce.Code != 4001 || !strings.Contains(ce.Reason, "another claim") {
		t.Fatalf("after the claim changed: %v", err)
	}
	// A fresh token of another uid is refused (the claim is uid again).
	g.PutTopic(topicDoc("uid"))
	c2, err := pushclient.Dial(ctx, pushclient.Options{Edge: g.URL, Topic: "orders", Transport: "ws", Header: http.Header{"Authorization": {"Bearer " + token("s-alice", "alice")}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if ev, err := c2.Next(ctx); err != nil || ev.Type != "ready" {
		t.Fatalf("%+v %v", ev, err)
	}
	if err := c2.Refresh(ctx, token("s-alice", "bob")); err != nil {
		t.Fatal(err)
	}
	for err == nil {
		_, err = c2.Next(ctx)
	}
	if !errors.As(err, &ce) || ce.Code != 1008 || !strings.Contains(ce.Reason, "another user") {
		t.Errorf("a fresh token of another uid: %v", err)
	}
}
