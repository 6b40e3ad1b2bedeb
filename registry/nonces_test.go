package registry_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/registry"
)

// claim claims a fresh nonce within a second, as the edge does.
func claim(s *registry.NonceStore) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return s.Claim(ctx, "shop."+nuid.Next())
}

func deleteNonces(t *testing.T, nc *nats.Conn) {
	t.Helper()
	js, _ := jetstream.New(nc)
	if err := js.DeleteKeyValue(context.Background(), registry.BucketNonces); err != nil {
		t.Fatal(err)
	}
}

// A nonce bucket deleted with the bus up is re-created by a store allowed
// to create it, and claims (replays still refused) work again.
func TestNonceStoreRecreatesDeletedBucket(t *testing.T) {
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	store := registry.NewNonceStore(nc, registry.BucketOptions{})
	if err := claim(store); err != nil {
		t.Fatal(err)
	}
	deleteNonces(t, nc)
	if err := claim(store); err == nil {
		t.Fatal("a claim with the bucket gone succeeded")
	}
	natstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error { return claim(store) })
	ctx := context.Background()
	if err := store.Claim(ctx, "shop.0123456789abcdef"); err != nil {
		t.Fatal(err)
	}
	if err := store.Claim(ctx, "shop.0123456789abcdef"); !errors.Is(err, registry.ErrReplay) {
		t.Fatalf("replay after re-creation: %v", err)
	}
}

// An edge's NATS user may not create streams: its store cannot re-create
// the bucket, the admin node's KeepNonces does, and the edge's claims work
// again without a restart.
func TestKeepNoncesForEdgesThatCannotCreate(t *testing.T) {
	o := natstest.DefaultOptions(t)
	o.Users = []*server.User{
		{Username: bus.UserAdmin, Password: "admin-pw", Permissions: bus.RolePermissions(bus.UserAdmin)},
		{Username: bus.UserEdge, Password: "edge-pw", Permissions: bus.RolePermissions(bus.UserEdge)},
	}
	s := natstest.RunServerWithOptions(t, o)
	admin := natstest.Connect(t, s, nats.UserInfo(bus.UserAdmin, "admin-pw"))
	edge := natstest.Connect(t, s, nats.UserInfo(bus.UserEdge, "edge-pw"), nats.CustomInboxPrefix(bus.InboxPrefix(bus.UserEdge)), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	js, _ := jetstream.New(admin)
	if _, err := registry.OpenNonces(context.Background(), js, registry.BucketOptions{}); err != nil {
		t.Fatal(err)
	}
	store := registry.NewNonceStore(edge, registry.BucketOptions{})
	if err := claim(store); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	keepErrs := make(chan error, 10)
	if err := registry.KeepNonces(ctx, admin, registry.BucketOptions{}, func(err error) { keepErrs <- err }); err != nil {
		t.Fatal(err)
	}
	deleteNonces(t, admin)
	natstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		select {
		case err := <-keepErrs:
			return fmt.Errorf("keeper: %v", err)
		default:
		}
		return claim(store)
	})
}
