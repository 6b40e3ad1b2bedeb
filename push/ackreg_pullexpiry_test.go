package push_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/push/pushclient"
)

// Regression (review of the acks): a pull whose token expires while it waits is answered 403
// FORBIDDEN ("the token expired; reconnect with a fresh one"), the code
// of a revoked grant; a token that has expired is otherwise 401.
func TestAckRegressPullTokenExpiresWhileWaiting(t *testing.T) {
	g, _, _ := start(t)
	token, _ := shopIssuer(t, g)
	o := pushclient.Options{Edge: g.URL, Topic: "orders", Header: http.Header{"Authorization": {"Bearer " + token("alice", time.Now().Add(2*time.Second))}}}
	_, err := pushclient.Pull(context.Background(), o, 0, 20*time.Second)
	var he *pushclient.HTTPError
	if !errors.As(err, &he) || he.Status != 401 {
		t.Fatalf("%v, want 401", err)
	}
}
