package registry_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
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
	return s.Claim(ctx, "shop."+nuid.Next(), time.Now())
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
	js, _ := jetstream.New(nc)
	// Created up front, as serve does: a request signed before the bucket
	// existed is refused.
	if _, err := registry.OpenNonces(context.Background(), js, registry.BucketOptions{}); err != nil {
		t.Fatal(err)
	}
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
	now := time.Now()
	if err := store.Claim(ctx, "shop.0123456789abcdef", now); err != nil {
		t.Fatal(err)
	}
	if err := store.Claim(ctx, "shop.0123456789abcdef", now); !errors.Is(err, registry.ErrReplay) {
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
	// The broken stream is put in place before the keeper runs, and only
	// once the server has finished removing the old stream: one created
	// at once can lose its files to that removal (the very race the
	// keeper guards against) and vanish, and the keeper then creates a
	// sound bucket without ever meeting the broken one.
	deleteNonces(t, admin)
	natstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if _, err := js.Stream(ctx, "KV_"+registry.BucketNonces); !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("the old stream is still there: %v", err)
		}
		return nil
	})
	time.Sleep(time.Second)
	// A stream of the bucket's name that takes no write: its subjects
	// are not the bucket's.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "KV_" + registry.BucketNonces, Subjects: []string{"$KV.broken." + registry.BucketNonces + ".>"},
		MaxMsgsPerSubject: 1,
	}); err != nil {
		t.Fatal(err)
	}
	keepErrs := make(chan error, 10)
	if err := registry.KeepNonces(ctx, admin, registry.BucketOptions{}, func(err error) {
		select {
		case keepErrs <- err:
		default:
		}
	}); err != nil {
		t.Fatal(err)
	}
	// The keeper looks at once when it hears of a deletion (else every
	// 30 s): tell it of one, as the server would.
	if err := admin.Publish(bus.NonceBucketDeleted, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-keepErrs:
		if !strings.Contains(err.Error(), "stored nothing") {
			t.Fatalf("keeper: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the keeper did not notice a stream that stores nothing")
	}
	natstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error { return claim(store) })
}

// A re-created bucket has forgotten the nonces claimed before: requests
// signed before it are refused on every edge — the edge that claimed them,
// one that heard of the deletion but saw no traffic during it (its claim's
// revision is above any it knew: only the advisory tells), and one that may
// not hear the advisory (an older permission list), whose first claim
// lands in the new bucket with a revision it has seen. Requests signed
// after the re-creation pass on all three.
func TestNonceStoreRefusesRequestsSignedBeforeRecreation(t *testing.T) {
	noAdvisory := bus.RolePermissions(bus.UserEdge)
	noAdvisory.Subscribe.Allow = slices.DeleteFunc(slices.Clone(noAdvisory.Subscribe.Allow), func(s string) bool { return s == bus.NonceBucketDeleted })
	o := natstest.DefaultOptions(t)
	o.Users = []*server.User{
		{Username: bus.UserAdmin, Password: "admin-pw", Permissions: bus.RolePermissions(bus.UserAdmin)},
		{Username: bus.UserEdge, Password: "edge-pw", Permissions: bus.RolePermissions(bus.UserEdge)},
		{Username: "edge-old", Password: "old-pw", Permissions: noAdvisory},
	}
	s := natstest.RunServerWithOptions(t, o)
	admin := natstest.Connect(t, s, nats.UserInfo(bus.UserAdmin, "admin-pw"))
	edgeConn := func(user, pw string) *nats.Conn {
		return natstest.Connect(t, s, nats.UserInfo(user, pw), nats.CustomInboxPrefix(bus.InboxPrefix(bus.UserEdge)), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	}
	js, _ := jetstream.New(admin)
	ctx := context.Background()
	if _, err := registry.OpenNonces(ctx, js, registry.BucketOptions{}); err != nil {
		t.Fatal(err)
	}
	keepCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := registry.KeepNonces(keepCtx, admin, registry.BucketOptions{}, nil); err != nil {
		t.Fatal(err)
	}
	a := registry.NewNonceStore(edgeConn(bus.UserEdge, "edge-pw"), registry.BucketOptions{})
	b := registry.NewNonceStore(edgeConn(bus.UserEdge, "edge-pw"), registry.BucketOptions{})
	c := registry.NewNonceStore(edgeConn("edge-old", "old-pw"), registry.BucketOptions{})
	other := registry.NewNonceStore(admin, registry.BucketOptions{}) // the traffic of further edges

	// Three requests signed and claimed on edge a, then traffic on b and c.
	signed := time.Now()
	keys := map[*registry.NonceStore]string{a: "shop.a" + nuid.Next(), b: "shop.b" + nuid.Next(), c: "shop.c" + nuid.Next()}
	for _, st := range []*registry.NonceStore{a, b, c} {
		if err := a.Claim(ctx, keys[st], signed); err != nil {
			t.Fatal(err)
		}
	}
	for _, st := range []*registry.NonceStore{b, c, c} {
		if err := claim(st); err != nil {
			t.Fatal(err)
		}
	}
	deleted := time.Now()
	deleteNonces(t, admin)
	natstest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if !b.NotBefore().After(deleted) {
			return fmt.Errorf("edge b has not heard of the deletion: not before %v", b.NotBefore())
		}
		_, err := js.KeyValue(ctx, registry.BucketNonces)
		return err // re-created by KeepNonces
	})
	// c's first claim in the new bucket: revision 1, below what it knew.
	if err := c.Claim(ctx, keys[c], signed); !errors.Is(err, registry.ErrSignedBeforeLoss) {
		t.Errorf("edge c, replay signed before the deletion: %v", err)
	}
	// Traffic elsewhere lifts the new bucket's revisions above what b knew.
	for range 5 {
		if err := claim(other); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Claim(ctx, keys[b], signed); !errors.Is(err, registry.ErrSignedBeforeLoss) {
		t.Errorf("edge b, replay signed before the deletion: %v", err)
	}
	if err := a.Claim(ctx, keys[a], signed); !errors.Is(err, registry.ErrSignedBeforeLoss) {
		t.Errorf("edge a, replay signed before the deletion: %v", err)
	}
	// Signatures carry whole seconds: one signed in the second the bucket
	// was created passes (it is re-created a second after the deletion at
	// the soonest, so nothing claimed before was signed in that second).
	info, err := js.Stream(ctx, "KV_"+registry.BucketNonces)
	if err != nil {
		t.Fatal(err)
	}
	created := info.CachedInfo().Created
	if !created.Truncate(time.Second).After(deleted) {
		t.Errorf("re-created at %v, within a second of the deletion at %v", created, deleted)
	}
	for name, st := range map[string]*registry.NonceStore{"a": a, "b": b, "c": c} {
		if err := claim(st); err != nil {
			t.Errorf("edge %s, signed after the re-creation: %v", name, err)
		}
		if err := st.Claim(ctx, "shop."+nuid.Next(), created.Truncate(time.Second)); err != nil {
			t.Errorf("edge %s, signed in the second of the re-creation: %v", name, err)
		}
	}
}
