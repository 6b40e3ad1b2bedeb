package registry_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
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

// A read of the last records starts near the end of a long trail, a read
// past its deadline stops with what it has, and a trail deleted by hand
// is made again by the next write, which it records.
func TestAuditBounded(t *testing.T) {
	s := natstest.RunServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc := natstest.Connect(t, s)
	c, err := registry.NewClient(ctx, nc, registry.BucketOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		if err := c.Record(ctx, "cache", "purge", fmt.Sprint("api", i)); err != nil {
			t.Fatal(err)
		}
	}
	last, err := c.Audit(ctx, time.Time{}, "", 2)
	if err != nil || len(last) != 2 || last[1].Key != "api299" || last[0].Key != "api298" {
		t.Fatalf("%v %+v", err, last)
	}
	short, cancelShort := context.WithTimeout(ctx, time.Nanosecond)
	defer cancelShort()
	if _, err := c.Audit(short, time.Time{}, "cache", 10); err == nil {
		t.Error("a read past its deadline did not stop")
	}
	if _, err := c.Audit(ctx, time.Time{}, ">", 10); !errors.Is(err, registry.ErrAuditKind) {
		t.Errorf("a wildcard kind: %v", err)
	}
	js, _ := jetstream.New(nc)
	if err := js.DeleteStream(ctx, bus.StreamAudit); err != nil {
		t.Fatal(err)
	}
	if err := c.Record(ctx, "cache", "purge", "after"); err != nil {
		t.Fatalf("a write after the trail was deleted: %v", err)
	}
	if got, _ := c.Audit(ctx, time.Time{}, "", 0); len(got) != 1 || got[0].Key != "after" {
		t.Errorf("the trail made again: %+v", got)
	}
}
