package registry_test

import (
	"context"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/registry"
)

// A client As an actor writes that actor into the trail; the trail reads
// by kind and since a time, and keeps its order.
func TestAuditActor(t *testing.T) {
	s := natstest.RunServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := registry.NewClient(ctx, natstest.Connect(t, s), registry.BucketOptions{})
	if err != nil {
		t.Fatal(err)
	}
	doc := []byte(`{"name":"a1","pool":"p","route":{"path":"/a1"},"backend":{"type":"mock"}}`)
	if _, err := c.As("token:ops-1").Put(ctx, doc); err != nil {
		t.Fatal(err)
	}
	mid := time.Now()
	time.Sleep(10 * time.Millisecond)
	if _, err := c.SetFault(ctx, "a1", &registry.Fault{ExpiresAt: time.Now().Add(time.Hour), Abort: &registry.FaultAbort{Percent: 1, Static: registry.Static{Status: 503}}}); err != nil {
		t.Fatal(err)
	}
	all, err := c.Audit(ctx, time.Time{}, "", 0)
	if err != nil || len(all) != 2 {
		t.Fatalf("%v %+v", err, all)
	}
	if all[0].Actor != "token:ops-1" || all[0].Kind != "api" || all[0].Revision == 0 || all[1].Kind != "fault" || all[1].Seq <= all[0].Seq {
		t.Errorf("%+v", all)
	}
	if since, _ := c.Audit(ctx, mid, "", 0); len(since) != 1 || since[0].Kind != "fault" {
		t.Errorf("since: %+v", since)
	}
	if apis, _ := c.Audit(ctx, time.Time{}, "api", 0); len(apis) != 1 || apis[0].Key != "a1" {
		t.Errorf("by kind: %+v", apis)
	}
}
