package push_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/jetway-gw/jetway/push/pushclient"
)

// Regression (review of the acks): the two push streams are made at once, so their epochs (their
// creation times, in ms) are equal or the latest_only one's is the
// later. An ack is kept per topic name whatever its mode, and later()
// orders acks of different streams by epoch: after a topic changes mode
// the stored ack is of the other stream, and either stays "later" for
// ever (latest_only → durable: every new ack is refused, each after=ack
// start is an epoch gap and everything kept — a pull never progresses),
// or is compared by sequence across streams (equal epochs).
func TestAckRegressAckAfterModeChange(t *testing.T) {
	g, pub, shop := start(t)
	g.PutTopic(`{"name":"prices","mode":"latest_only","publish":["pub"],"subscribe":["*"]}`)
	post := func(data string) {
		if r := g.Do("POST", "/_jetway/publish/prices", strings.NewReader(data), "X-Api-Key", pub); r.Status != 200 {
			t.Fatalf("%d %s", r.Status, r.Body)
		}
	}
	ctx := context.Background()
	o := pushclient.Options{Edge: g.URL, Topic: "prices", Header: http.Header{"X-Api-Key": {shop}}, Device: "d1"}
	post("1")
	p, err := pushclient.Pull(ctx, o, 0, 0)
	if err != nil || len(p.Messages) != 1 {
		t.Fatalf("%+v %v", p, err)
	}
	if _, err := pushclient.Ack(ctx, o, p.Cursor); err != nil {
		t.Fatal(err)
	}
	t.Logf("latest_only ack %s", p.Cursor)
	g.PutTopic(`{"name":"prices","publish":["pub"],"subscribe":["*"]}`) // durable now
	post("a")
	post("b")
	p, err = pushclient.Pull(ctx, o, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after the mode change: %d messages, gaps %+v, cursor %s", len(p.Messages), p.Gaps, p.Cursor)
	acked, err := pushclient.Ack(ctx, o, p.Cursor)
	if err != nil {
		t.Fatal(err)
	}
	if acked != p.Cursor {
		t.Errorf("ack %s answered with the stored %s (of the other stream): the ack no longer moves", p.Cursor, acked)
	}
	p, err = pushclient.Pull(ctx, o, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Messages) != 0 || len(p.Gaps) != 0 {
		t.Errorf("pull after acking everything: %d messages again, gaps %+v", len(p.Messages), p.Gaps)
	}
}
