package registry_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/registry"
)

// clientWithStore starts a server whose JetStream may reserve maxStore
// bytes (a small disk, or an operator's max_store) and opens the registry
// on it.
func clientWithStore(t *testing.T, maxStore int64) (*registry.Client, jetstream.JetStream) {
	t.Helper()
	opts := natstest.DefaultOptions(t)
	opts.JetStreamMaxStore = maxStore
	nc := natstest.Connect(t, natstest.RunServerWithOptions(t, opts))
	c, err := registry.NewClient(context.Background(), nc, registry.BucketOptions{})
	if err != nil {
		t.Fatalf("NewClient with %d MiB of store: %v", maxStore>>20, err)
	}
	js, _ := jetstream.New(nc)
	return c, js
}

// A server that cannot reserve two 8 GiB streams (CI's disk was such a
// one) still gets push, with smaller caps, and nothing else is refused.
func TestPushStreamsFitASmallStore(t *testing.T) {
	ctx := context.Background()
	c, js := clientWithStore(t, 3<<30)
	if err := c.PushStreamsErr(); err != nil {
		t.Fatalf("push streams on a 3 GiB store: %v", err)
	}
	var total int64
	for _, p := range []bus.PushStore{bus.PushDurable, bus.PushLatest} {
		s, err := js.Stream(ctx, p.Stream)
		if err != nil {
			t.Fatalf("stream %s: %v", p.Stream, err)
		}
		mb := s.CachedInfo().Config.MaxBytes
		if mb < registry.PushStreamMinBytes || mb >= registry.PushStreamMaxBytes {
			t.Errorf("%s: MaxBytes %d MiB, want a halving of %d MiB", p.Stream, mb>>20, registry.PushStreamMaxBytes>>20)
		}
		total += mb
	}
	if total > 3<<30 {
		t.Errorf("the streams reserve %d MiB of a 3 GiB store", total>>20)
	}
	if _, err := c.PutTopic(ctx, []byte(`{"name":"orders"}`)); err != nil {
		t.Errorf("PutTopic: %v", err)
	}
}

// With no room for push at all, APIs are still written; topics are
// refused with the reason.
func TestNoRoomForPushLeavesAPIsServed(t *testing.T) {
	ctx := context.Background()
	// The registry's bounded buckets (cache, audit, ACME) reserve 576 MiB;
	// 600 MiB leaves less than PushStreamMinBytes.
	c, _ := clientWithStore(t, 600<<20)
	if c.PushStreamsErr() == nil {
		t.Fatal("PushStreamsErr is nil on a store with no room for push")
	}
	if _, err := c.Put(ctx, []byte(`{"name":"orders","pool":"orders","route":{"method":"GET","path":"/orders"},"backend":{"type":"http","url":"http://127.0.0.1:1"}}`)); err != nil {
		t.Errorf("API put refused for want of push storage: %v", err)
	}
	if _, err := c.PutTopic(ctx, []byte(`{"name":"orders"}`)); err == nil {
		t.Error("PutTopic accepted a topic with no stream to keep its messages")
	}
}

// On a cluster whose peers have not the room for R3 streams of 8 GiB
// (nats-server: "no suitable peers for placement, insufficient storage")
// the push streams take a halving that fits, as on one server.
func TestPushStreamsFitAClusterWithSmallStores(t *testing.T) {
	_, urls := natstest.RunCluster(t, 3, func(o *server.Options) { o.JetStreamMaxStore = 3 << 30 })
	nc, err := nats.Connect(urls)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c, err := registry.NewClient(context.Background(), nc, registry.BucketOptions{Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.PushStreamsErr(); err != nil {
		t.Fatalf("R3 push streams on 3 GiB stores: %v", err)
	}
	js, _ := jetstream.New(nc)
	s, err := js.Stream(context.Background(), bus.PushDurable.Stream)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := s.CachedInfo().Config; cfg.Replicas != 3 || cfg.MaxBytes >= registry.PushStreamMaxBytes {
		t.Errorf("replicas %d, MaxBytes %d MiB", cfg.Replicas, cfg.MaxBytes>>20)
	}
}
