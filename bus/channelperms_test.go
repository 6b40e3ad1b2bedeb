package bus_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/bus/natstest"
)

// refusedWait bounds the checks that something refused does not happen.
const refusedWait = 300 * time.Millisecond

// The channels bucket on a real server with the roles' users: a worker of
// pool p writes the controller states and leases of pool p's APIs, reads
// and watches pool p's keys and exchanges pool p's outcome reports — and
// writes none of the operators' overrides, nor reads, watches, writes or
// reports anything of pool q.
func TestChannelsAreEachPoolsOwn(t *testing.T) {
	o := natstest.DefaultOptions(t)
	o.Users = []*server.User{
		{Username: bus.UserAdmin, Password: "a", Permissions: bus.RolePermissions(bus.UserAdmin)},
		{Username: bus.UserWorker, Password: "w", Permissions: bus.RolePermissions(bus.UserWorker, "p")},
	}
	s := natstest.RunServerWithOptions(t, o)
	admin := natstest.Connect(t, s, nats.UserInfo(bus.UserAdmin, "a"))
	violations := make(chan error, 64)
	worker := natstest.Connect(t, s, nats.UserInfo(bus.UserWorker, "w"),
		nats.CustomInboxPrefix(bus.InboxPrefix(bus.UserWorker, "p")),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				select {
				case violations <- err:
				default:
				}
			}
		}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	ajs, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	akv, err := ajs.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bus.BucketChannels, History: 64})
	if err != nil {
		t.Fatal(err)
	}
	if info, err := ajs.Stream(ctx, "KV_"+bus.BucketChannels); err != nil || !info.CachedInfo().Config.AllowDirect {
		t.Fatalf("the bucket takes direct gets: %v", err)
	}
	wjs, err := jetstream.New(worker)
	if err != nil {
		t.Fatal(err)
	}
	wkv, err := wjs.KeyValue(ctx, bus.BucketChannels)
	if err != nil {
		t.Fatalf("the worker opens the channels bucket: %v", err)
	}

	// Its own pool's states and leases: created, updated by revision, read.
	for _, key := range []string{"state.p.orders", "lease.p.orders"} {
		rev, err := wkv.Create(ctx, key, []byte("1"))
		if err != nil {
			t.Fatalf("the worker creates %s: %v", key, err)
		}
		if _, err := wkv.Update(ctx, key, []byte("2"), rev); err != nil {
			t.Fatalf("the worker updates %s: %v", key, err)
		}
		if e, err := wkv.Get(ctx, key); err != nil || string(e.Value()) != "2" {
			t.Fatalf("the worker reads %s: %v", key, err)
		}
	}
	// The operators' overrides of its pool: read, never written.
	if _, err := akv.Put(ctx, "manual.p.orders", []byte("admin")); err != nil {
		t.Fatal(err)
	}
	if e, err := wkv.Get(ctx, "manual.p.orders"); err != nil || string(e.Value()) != "admin" {
		t.Fatalf("the worker reads its pool's overrides: %v", err)
	}

	// Refused writes: the overrides, another pool's state and lease. The
	// server drops the publish, so the write times out; what the admin
	// reads is unchanged.
	if _, err := akv.Put(ctx, "state.q.orders", []byte("q's")); err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct {
		key, before string
		create      bool // a lease is taken by create; overrides and states are put
	}{
		{"manual.p.orders", "admin", false},
		{"state.q.orders", "q's", false},
		{"lease.q.orders", "", true},
	} {
		short, cancelShort := context.WithTimeout(ctx, refusedWait)
		var err error
		if w.create {
			_, err = wkv.Create(short, w.key, []byte("forged"))
		} else {
			_, err = wkv.Put(short, w.key, []byte("forged"))
		}
		cancelShort()
		if err == nil {
			t.Errorf("the worker wrote %s", w.key)
		}
		e, err := akv.Get(ctx, w.key)
		switch {
		case w.before == "" && !errors.Is(err, jetstream.ErrKeyNotFound):
			t.Errorf("after the worker's refused write %s holds %v (err %v)", w.key, e, err)
		case w.before != "" && (err != nil || string(e.Value()) != w.before):
			t.Errorf("after the worker's refused write %s: %v", w.key, err)
		}
		expectViolation(t, violations, "$KV."+bus.BucketChannels+"."+w.key)
	}
	// Another pool's keys are not read either.
	short, cancelShort := context.WithTimeout(ctx, refusedWait)
	_, err = wkv.Get(short, "state.q.orders")
	cancelShort()
	if err == nil {
		t.Error("the worker read pool q's state")
	}
	expectViolation(t, violations, "$JS.API.DIRECT.GET.KV_"+bus.BucketChannels+".$KV."+bus.BucketChannels+".state.q.orders")

	// A watch of its pool's keys (as the worker's controller makes it):
	// the pool's current values, then the admin's new override.
	if _, err := akv.Put(ctx, "state.q.x", []byte("q")); err != nil {
		t.Fatal(err)
	}
	w, err := wkv.Watch(ctx, "*.p.>")
	if err != nil {
		t.Fatalf("the worker watches its pool's keys: %v", err)
	}
	defer func() { _ = w.Stop() }()
	next := func() jetstream.KeyValueEntry {
		t.Helper()
		select {
		case e := <-w.Updates():
			return e
		case <-time.After(2 * time.Second):
			t.Fatal("the worker's watch heard nothing")
			return nil
		}
	}
	initial := map[string]string{}
	for e := next(); e != nil; e = next() {
		initial[e.Key()] = string(e.Value())
	}
	if len(initial) != 3 || initial["state.p.orders"] != "2" || initial["lease.p.orders"] != "2" || initial["manual.p.orders"] != "admin" {
		t.Fatalf("the worker's watch began with %v", initial)
	}
	if _, err := akv.Put(ctx, "manual.p.orders", []byte("cut a")); err != nil {
		t.Fatal(err)
	}
	if e := next(); e == nil || e.Key() != "manual.p.orders" || string(e.Value()) != "cut a" {
		t.Fatalf("the worker's watch heard %v", e)
	}

	// A watch of another pool's keys is refused: no consumer, or no
	// update of pool q.
	short, cancelShort = context.WithTimeout(ctx, refusedWait)
	qw, err := wkv.Watch(short, "*.q.>")
	cancelShort()
	if err == nil {
		t.Log("the watch of pool q's keys was made; checking it hears nothing of pool q")
		defer func() { _ = qw.Stop() }()
		if _, err := akv.Put(ctx, "state.q.x", []byte("q again")); err != nil {
			t.Fatal(err)
		}
		timeout := time.After(refusedWait)
	hear:
		for {
			select {
			case e, ok := <-qw.Updates():
				if !ok {
					break hear
				}
				if e != nil && strings.Contains(e.Key(), ".q.") {
					t.Fatalf("the worker watched pool q's key %s", e.Key())
				}
			case <-timeout:
				break hear
			}
		}
	}

	// Outcome reports: its pool's are published and heard; pool q's are
	// refused and reach no one.
	own, err := worker.SubscribeSync(bus.ChannelReportPrefix + "p.>")
	if err != nil {
		t.Fatal(err)
	}
	heard, err := admin.SubscribeSync(bus.ChannelReportPrefix + ">")
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := worker.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := worker.Publish(bus.ChannelReportPrefix+"p.orders", []byte("report")); err != nil {
		t.Fatal(err)
	}
	if m, err := own.NextMsg(2 * time.Second); err != nil || string(m.Data) != "report" {
		t.Fatalf("the worker hears its pool's report: %v", err)
	}
	if m, err := heard.NextMsg(2 * time.Second); err != nil || m.Subject != bus.ChannelReportPrefix+"p.orders" {
		t.Fatalf("the admin hears pool p's report: %v", err)
	}
	if err := worker.Publish(bus.ChannelReportPrefix+"q.orders", []byte("forged")); err != nil {
		t.Fatal(err)
	}
	expectViolation(t, violations, bus.ChannelReportPrefix+"q.orders")
	if m, err := heard.NextMsg(refusedWait); err == nil {
		t.Fatalf("pool q's report from pool p's worker reached the admin: %s", m.Subject)
	}
	if _, err := worker.SubscribeSync(bus.ChannelReportPrefix + "q.>"); err != nil {
		t.Fatal(err)
	}
	expectViolation(t, violations, bus.ChannelReportPrefix+"q.>")
}

// expectViolation waits for the server's permissions violation naming
// subject (the server reports each refused publish and subscription).
func expectViolation(t *testing.T, violations <-chan error, subject string) {
	t.Helper()
	var seen []string
	natstest.CheckFor(t, 2*time.Second, 5*time.Millisecond, func() error {
		for {
			select {
			case err := <-violations:
				if strings.Contains(err.Error(), `"`+subject+`"`) {
					return nil
				}
				seen = append(seen, err.Error())
			default:
				return fmt.Errorf("no permissions violation for %q (saw %q)", subject, seen)
			}
		}
	})
}
