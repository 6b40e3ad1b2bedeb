package registry_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/registry"
)

// updateStream changes a bucket's stream config with f.
func updateStream(t *testing.T, js jetstream.JetStream, bucket string, f func(*jetstream.StreamConfig)) {
	t.Helper()
	ctx := ctxTimeout(t, 5*time.Second)
	st, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	f(&cfg)
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
}

// swallow subscribes to subject and answers nothing: a request on it (a
// read, a write) waits for its deadline.
func swallow(t *testing.T, nc *nats.Conn, subject string) {
	t.Helper()
	sub, err := nc.SubscribeSync(subject)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// lastChange is the newest audit record of kind.
func lastChange(t *testing.T, c *registry.Client, kind string) registry.Change {
	t.Helper()
	all, err := c.Audit(ctxTimeout(t, 5*time.Second), time.Time{}, kind, 0)
	if err != nil || len(all) == 0 {
		t.Fatalf("audit of %s: %v %+v", kind, err, all)
	}
	return all[len(all)-1]
}

// A write that got no answer and was read back in force is settled: its
// audit record, skipped when the answer did not come, is written then,
// marked settled by read-back; a write whose secret never reached its
// caller says so. Settle refuses before a read-back showed the write.
func TestSettleAfterReadBack(t *testing.T) {
	ctx, nc, c := registryClient(t)
	var err error
	js, _ := jetstream.New(nc)
	noAck(t, js, registry.BucketFlags)
	noAck(t, js, registry.BucketApps)

	wctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	_, err = c.SetDegrade(wctx, "orders", &registry.Degrade{On: true, Reason: "late"})
	cancel()
	var ue *registry.OutcomeUnknownError
	if !errors.As(err, &ue) {
		t.Fatalf("want *OutcomeUnknownError, got %v", err)
	}
	if all, _ := c.Audit(ctx, time.Time{}, "degrade", 0); len(all) != 0 {
		t.Fatalf("an unanswered write audited: %+v", all)
	}
	if err := ue.Settle(ctx, js); !errors.Is(err, registry.ErrNotSettled) {
		t.Fatalf("settle before a read-back: %v; want ErrNotSettled", err)
	}
	landed, rev, err := ue.Recheck(ctx, js)
	if err != nil || !landed {
		t.Fatalf("read back: landed %v, %v", landed, err)
	}
	if err := ue.Settle(ctx, js); err != nil {
		t.Fatal(err)
	}
	ch := lastChange(t, c, "degrade")
	if ch.Action != "put" || ch.Key != "orders" || ch.Revision != rev || ch.Settled != registry.SettledReadBack {
		t.Errorf("audit record %+v; want put orders at %d, settled by read-back", ch, rev)
	}

	// An app created without answer: it stands, recorded, but its key
	// was never shown.
	wctx, cancel = context.WithTimeout(context.Background(), 500*time.Millisecond)
	_, _, _, err = c.CreateApp(wctx, &registry.App{ID: "shop"}, false)
	cancel()
	if !errors.As(err, &ue) {
		t.Fatalf("want *OutcomeUnknownError, got %v", err)
	}
	if landed, _, err := ue.Recheck(ctx, js); err != nil || !landed {
		t.Fatalf("read back: landed %v, %v", landed, err)
	}
	if err := ue.Settle(ctx, js); err == nil || !strings.Contains(err.Error(), "never shown") {
		t.Errorf("settle of an app create: %v; want the key never shown", err)
	}
	if ch := lastChange(t, c, "app"); ch.Key != "shop" || ch.Settled != registry.SettledReadBack {
		t.Errorf("audit record %+v", ch)
	}
}

// A promotion that got no answer and was read back in force is settled as
// an answered one: the promotion is audited and the draft removed.
func TestPromoteSettledAfterReadBack(t *testing.T) {
	ctx, nc, c := registryClient(t)
	var err error
	d, err := c.PutDraft(ctx, draftEntry("orders", "/orders", "key"))
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	noAck(t, js, registry.BucketAPIs)
	pctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_, err = c.Promote(pctx, "orders", d.Revision, 0, true)
	cancel()
	var ue *registry.OutcomeUnknownError
	if !errors.As(err, &ue) || ue.Op != "put" || ue.Key != "orders" {
		t.Fatalf("want the promotion's outcome unknown, got %v", err)
	}
	// The stream answers again by the time of the read-back.
	updateStream(t, js, registry.BucketAPIs, func(cfg *jetstream.StreamConfig) { cfg.NoAck = false })
	landed, rev, err := ue.Recheck(ctx, js)
	if err != nil || !landed {
		t.Fatalf("read back: landed %v, %v", landed, err)
	}
	if _, err := c.Get(ctx, registry.DraftKey("orders")); err != nil {
		t.Fatalf("the draft before settling: %v", err)
	}
	if err := ue.Settle(ctx, js); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, registry.DraftKey("orders")); !errors.Is(err, registry.ErrNotFound) {
		t.Errorf("the draft after settling: %v; want removed", err)
	}
	all, err := c.Audit(ctx, time.Time{}, "api", 0)
	if err != nil {
		t.Fatal(err)
	}
	var promote, removal bool
	for _, ch := range all {
		switch {
		case ch.Action == "promote" && ch.Key == "orders" && ch.Revision == rev && ch.Settled == registry.SettledReadBack:
			promote = true
		case ch.Action == "delete" && ch.Key == registry.DraftKey("orders") && ch.Settled == registry.SettledReadBack:
			removal = true
		}
	}
	if !promote || !removal {
		t.Errorf("audit trail %+v; want the promotion and the draft's removal, settled by read-back", all)
	}
}

// The read of a key's revision before an unconditional write has a short
// timeout of its own: a read that gets no answer leaves the write its time
// (it is sent, and answered), a caller gone during the read is a definite
// failure (nothing was sent), and a write whose revision before is not
// known is never read back as landed (the value may be an older write's).
func TestWriteBeforeReadWithoutAnswer(t *testing.T) {
	ctx, nc, c := registryClient(t)
	var err error
	on := &registry.Degrade{On: true, Reason: "same"}
	if _, err := c.SetDegrade(ctx, "orders", on); err != nil {
		t.Fatal(err)
	}
	// The client's bucket reads directly (allow_direct); with direct
	// reads off on the stream and a subscriber taking them, every read
	// of the client waits for its deadline. Fresh handles read through
	// the stream's API.
	js, _ := jetstream.New(nc)
	updateStream(t, js, registry.BucketFlags, func(cfg *jetstream.StreamConfig) { cfg.AllowDirect = false })
	swallow(t, nc, "$JS.API.DIRECT.GET.KV_"+registry.BucketFlags+".>")

	wctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	f, err := c.SetFault(wctx, "orders", &registry.Fault{ExpiresAt: time.Now().Add(time.Hour), Abort: &registry.FaultAbort{Percent: 1, Static: registry.Static{Status: 503}}})
	cancel()
	if err != nil || f.Revision == 0 {
		t.Fatalf("write after a read without answer: %v; want it written", err)
	}

	cctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	_, err = c.SetFault(cctx, "orders", &registry.Fault{ExpiresAt: time.Now().Add(time.Hour), Abort: &registry.FaultAbort{Percent: 2, Static: registry.Static{Status: 503}}})
	cancel()
	if err == nil || errors.Is(err, registry.ErrOutcomeUnknown) || !strings.Contains(err.Error(), "nothing was written") {
		t.Fatalf("caller gone before the write was sent: %v; want nothing was written", err)
	}

	// The write of the value the switch has already is held (taken, never
	// stored nor answered): the switch read back is the older write's.
	updateStream(t, js, registry.BucketFlags, func(cfg *jetstream.StreamConfig) {
		cfg.Subjects = []string{"$KV." + registry.BucketFlags + ".fault.>"}
	})
	swallow(t, nc, "$KV."+registry.BucketFlags+".degrade.>")
	wctx, cancel = context.WithTimeout(context.Background(), 1500*time.Millisecond)
	_, err = c.SetDegrade(wctx, "orders", on)
	cancel()
	var ue *registry.OutcomeUnknownError
	if !errors.As(err, &ue) {
		t.Fatalf("want *OutcomeUnknownError, got %v", err)
	}
	updateStream(t, js, registry.BucketFlags, func(cfg *jetstream.StreamConfig) {
		cfg.Subjects = []string{"$KV." + registry.BucketFlags + ".>"}
	})
	landed, rev, err := ue.Recheck(ctx, js)
	if err != nil || landed {
		t.Fatalf("read back: landed %v at %d, %v; want not landed (the revision before is not known)", landed, rev, err)
	}
}
