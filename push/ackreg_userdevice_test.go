package push_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/push/pushclient"
)

// Regression (review of the acks): a connection with a token's user and a device keeps its acks
// under the device only (<topic>.<app>.d.<device>), yet what it receives
// — and so what its acks pass over — depends on the user too (to=user
// messages). Two users of one device id (a shared tablet, a re-login)
// share one cumulative ack over different views: alice's ack passes
// bob's message, and bob, resuming with after=ack on that device, never
// gets it, without a gap.
func TestAckRegressUserOnSharedDeviceLosesMessage(t *testing.T) {
	g, pub, _ := start(t)
	token, _ := shopIssuer(t, g)
	ctx := context.Background()
	as := func(user string) pushclient.Options {
		return pushclient.Options{Edge: g.URL, Topic: "orders", Device: "tablet",
			Header: http.Header{"Authorization": {"Bearer " + token(user, time.Now().Add(time.Hour))}}}
	}
	publish(t, g, pub, "?to=user&app=shop&user=bob", "for bob")
	publish(t, g, pub, "?to=user&app=shop&user=alice", "for alice")
	alice := as("alice")
	p, err := pushclient.Pull(ctx, alice, 0, 0)
	if err != nil || len(p.Messages) != 1 || p.Messages[0].Data != "for alice" {
		t.Fatalf("alice: %+v %v", p, err)
	}
	if _, err := pushclient.Ack(ctx, alice, p.Cursor); err != nil {
		t.Fatal(err)
	}
	p, err = pushclient.Pull(ctx, as("bob"), 0, 0) // after=ack by default
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Messages) != 1 || p.Messages[0].Data != "for bob" {
		t.Fatalf("bob on the same device after=ack: %+v — his message was skipped (gaps: %v)", p, p.Gaps)
	}
}
