package registry_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/registry"
)

// clients returns n registry clients, each on its own connection to s, as
// n separate CLI processes would be.
func clients(t *testing.T, s *server.Server, n int) []*registry.Client {
	t.Helper()
	cs := make([]*registry.Client, n)
	for i := range cs {
		c, err := registry.NewClient(context.Background(), natstest.Connect(t, s), registry.BucketOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cs[i] = c
	}
	return cs
}

// together runs fs at once (released by one close) and waits for them all.
func together(fs ...func()) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, f := range fs {
		wg.Add(1)
		go func() { defer wg.Done(); <-start; f() }()
	}
	close(start)
	wg.Wait()
}

func newApp(t *testing.T, c *registry.Client, id string) string {
	t.Helper()
	key, rec, err := registry.NewAPIKey()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutApp(context.Background(), &registry.App{ID: id, Status: registry.AppActive, Keys: []registry.AppKey{rec}}, registry.IfRevision(0)); err != nil {
		t.Fatal(err)
	}
	return key
}

func mustGetApp(t *testing.T, c *registry.Client, id string) *registry.App {
	t.Helper()
	a, err := c.GetApp(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

const rounds = 30

// A key rotation racing a grant: both land, and the key stored is the one
// the rotation returned (the old one is gone). Before UpdateApp the grant
// wrote back the app it had read, old key included, in some rounds.
func TestUpdateAppRotateKeyRacingGrant(t *testing.T) {
	s := natstest.RunServer(t)
	cs := clients(t, s, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range rounds {
		id := fmt.Sprintf("shop%d", i)
		old := newApp(t, cs[0], id)
		var newKey string
		var rotated *registry.App
		var rotErr, grantErr error
		together(func() {
			rotated, rotErr = cs[0].UpdateApp(ctx, id, func(a *registry.App) error {
				k, rec, err := registry.NewAPIKey()
				newKey, a.Keys = k, []registry.AppKey{rec}
				return err
			})
		}, func() {
			_, grantErr = cs[1].UpdateApp(ctx, id, func(a *registry.App) error {
				a.APIs = append(a.APIs, "orders.*")
				return nil
			})
		})
		if rotErr != nil || grantErr != nil {
			t.Fatalf("round %d: rotate: %v, grant: %v", i, rotErr, grantErr)
		}
		a := mustGetApp(t, cs[0], id)
		if len(a.Keys) != 1 || a.Keys[0].SHA256 != registry.KeyDigest(newKey) {
			t.Errorf("round %d: stored keys %+v are not the new key alone (old key kept: %v)", i, a.Keys,
				slices.ContainsFunc(a.Keys, func(k registry.AppKey) bool { return k.SHA256 == registry.KeyDigest(old) }))
		}
		if rotated.Keys[0].SHA256 != registry.KeyDigest(newKey) {
			t.Errorf("round %d: rotation returned key %s, not the one it made", i, rotated.Keys[0].ID)
		}
		if !slices.Equal(a.APIs, []string{"orders.*"}) {
			t.Errorf("round %d: grant lost: apis %q", i, a.APIs)
		}
	}
}

// A disable racing a grant is never undone.
func TestUpdateAppDisableRacingGrant(t *testing.T) {
	s := natstest.RunServer(t)
	cs := clients(t, s, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range rounds {
		id := fmt.Sprintf("shop%d", i)
		newApp(t, cs[0], id)
		var errs [2]error
		together(func() {
			_, errs[0] = cs[0].UpdateApp(ctx, id, func(a *registry.App) error { a.Status = registry.AppDisabled; return nil })
		}, func() {
			_, errs[1] = cs[1].UpdateApp(ctx, id, func(a *registry.App) error { a.APIs = append(a.APIs, "orders.*"); return nil })
		})
		if errs[0] != nil || errs[1] != nil {
			t.Fatalf("round %d: %v", i, errs)
		}
		a := mustGetApp(t, cs[0], id)
		if a.Status != registry.AppDisabled {
			t.Errorf("round %d: the disable was undone: status %s", i, a.Status)
		}
		if !slices.Equal(a.APIs, []string{"orders.*"}) {
			t.Errorf("round %d: grant lost: apis %q", i, a.APIs)
		}
	}
}

// N grants at once: none is lost, and the revision moved by exactly N.
func TestUpdateAppConcurrentGrants(t *testing.T) {
	const n = 6
	s := natstest.RunServer(t)
	cs := clients(t, s, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range rounds {
		id := fmt.Sprintf("shop%d", i)
		newApp(t, cs[0], id)
		before := mustGetApp(t, cs[0], id).Revision
		fs := make([]func(), n)
		errs := make([]error, n)
		for j := range fs {
			fs[j] = func() {
				_, errs[j] = cs[j].UpdateApp(ctx, id, func(a *registry.App) error {
					a.APIs = append(a.APIs, fmt.Sprintf("api%d", j))
					return nil
				})
			}
		}
		together(fs...)
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		a := mustGetApp(t, cs[0], id)
		got := slices.Sorted(slices.Values(a.APIs))
		want := []string{"api0", "api1", "api2", "api3", "api4", "api5"}
		if !slices.Equal(got, want) {
			t.Errorf("round %d: apis %q, want %q", i, got, want)
		}
		hs, err := jsKV(t, s, registry.BucketApps).History(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		writes := 0
		for _, h := range hs {
			if h.Revision() > before {
				writes++
			}
		}
		if writes != n {
			t.Errorf("round %d: %d writes after creation, want %d", i, writes, n)
		}
	}
}

func jsKV(t *testing.T, s *server.Server, bucket string) jetstream.KeyValue {
	t.Helper()
	js, err := jetstream.New(natstest.Connect(t, s))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(context.Background(), bucket)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// UpdateApp of a missing app is ErrNotFound; an error from the change, or an
// invalid result, writes nothing.
func TestUpdateAppRefusals(t *testing.T) {
	s := natstest.RunServer(t)
	c := clients(t, s, 1)[0]
	ctx := context.Background()
	if _, err := c.UpdateApp(ctx, "nobody", func(*registry.App) error { return nil }); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("missing app: %v", err)
	}
	newApp(t, c, "shop")
	rev := mustGetApp(t, c, "shop").Revision
	boom := errors.New("boom")
	if _, err := c.UpdateApp(ctx, "shop", func(*registry.App) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("change error: %v", err)
	}
	var ve *registry.ValidationError
	if _, err := c.UpdateApp(ctx, "shop", func(a *registry.App) error { a.Status = "maybe"; return nil }); !errors.As(err, &ve) {
		t.Fatalf("invalid result: %v", err)
	}
	if got := mustGetApp(t, c, "shop").Revision; got != rev {
		t.Fatalf("revision %d after refused updates, want %d", got, rev)
	}
	// Creating an app that exists is a conflict, not an overwrite.
	_, err := c.PutApp(ctx, &registry.App{ID: "shop", Status: registry.AppActive}, registry.IfRevision(0))
	var ce *registry.ConflictError
	if !errors.As(err, &ce) || ce.Want != 0 || ce.Current != rev {
		t.Fatalf("second create: %v", err)
	}
}

// Put, Delete and Rollback with IfRevision write only at that revision, and
// report a conflict with the current one.
func TestWritesIfRevision(t *testing.T) {
	s := natstest.RunServer(t)
	c := clients(t, s, 1)[0]
	ctx := context.Background()

	a1, err := c.Put(ctx, entry("a", "/a1"), registry.IfRevision(0)) // create only
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Put(ctx, entry("a", "/a1"), registry.IfRevision(0))
	wantConflict(t, "create of an existing api", err, 0, a1.Revision, "conflict: api a exists already at revision")

	a2, err := c.Put(ctx, entry("a", "/a2"), registry.IfRevision(a1.Revision))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Put(ctx, entry("a", "/a3"), registry.IfRevision(a1.Revision))
	wantConflict(t, "stale put", err, a1.Revision, a2.Revision,
		fmt.Sprintf("conflict: api a is at revision %d, not %d (changed by someone else); get it again and retry", a2.Revision, a1.Revision))
	_, err = c.Rollback(ctx, "a", a1.Revision, registry.IfRevision(a1.Revision))
	wantConflict(t, "stale rollback", err, a1.Revision, a2.Revision, "is at revision")
	err = c.Delete(ctx, "a", registry.IfRevision(a1.Revision))
	wantConflict(t, "stale delete", err, a1.Revision, a2.Revision, "is at revision")
	if e, _ := c.Get(ctx, "a"); e.Revision != a2.Revision {
		t.Fatalf("refused writes changed the api: revision %d, want %d", e.Revision, a2.Revision)
	}

	a3, err := c.Rollback(ctx, "a", a1.Revision, registry.IfRevision(a2.Revision))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, "a", registry.IfRevision(a3.Revision)); err != nil {
		t.Fatal(err)
	}
	// Deleted: "must not exist" holds again; a revision does not.
	_, err = c.Put(ctx, entry("a", "/a4"), registry.IfRevision(a3.Revision))
	wantConflict(t, "put over a deletion", err, a3.Revision, 0, "does not exist now")
	if _, err := c.Put(ctx, entry("a", "/a4"), registry.IfRevision(0)); err != nil {
		t.Fatalf("create after delete: %v", err)
	}

	// Two puts from the same revision at once: exactly one wins.
	cs := clients(t, s, 2)
	cur, _ := c.Get(ctx, "a")
	for i := range rounds {
		var errs [2]error
		var revs [2]uint64
		together(func() {
			a, err := cs[0].Put(ctx, entry("a", fmt.Sprintf("/x%d", i)), registry.IfRevision(cur.Revision))
			if err == nil {
				revs[0] = a.Revision
			}
			errs[0] = err
		}, func() {
			a, err := cs[1].Put(ctx, entry("a", fmt.Sprintf("/y%d", i)), registry.IfRevision(cur.Revision))
			if err == nil {
				revs[1] = a.Revision
			}
			errs[1] = err
		})
		won := 0
		for j, err := range errs {
			switch {
			case err == nil:
				won = j
			case !errors.Is(err, registry.ErrConflict):
				t.Fatalf("round %d: %v", i, err)
			}
		}
		if (errs[0] == nil) == (errs[1] == nil) {
			t.Fatalf("round %d: errors %v: want exactly one put to win", i, errs)
		}
		cur, _ = c.Get(ctx, "a")
		if cur.Revision != revs[won] {
			t.Fatalf("round %d: stored revision %d, winner's %d", i, cur.Revision, revs[won])
		}
	}

	if err := c.Delete(ctx, "a", registry.IfRevision(0)); err == nil {
		t.Fatal("delete --if-revision 0 accepted")
	}
}

func wantConflict(t *testing.T, what string, err error, want, current uint64, msg string) {
	t.Helper()
	var ce *registry.ConflictError
	if !errors.As(err, &ce) || !errors.Is(err, registry.ErrConflict) {
		t.Fatalf("%s: %v, want a *ConflictError", what, err)
	}
	if ce.Want != want || ce.Current != current || !strings.Contains(err.Error(), msg) {
		t.Fatalf("%s: %+v %q, want want=%d current=%d mentioning %q", what, ce, err, want, current, msg)
	}
}

// A raw write on a wildcard subject ($KV.jetway_apis.*) makes a key that no
// KV call can read. Every list skips and reports it; the others still list.
func TestListsSkipInvalidKeys(t *testing.T) {
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	c := clients(t, s, 1)[0]
	ctx := context.Background()
	if _, err := c.Put(ctx, entry("good", "/good")); err != nil {
		t.Fatal(err)
	}
	newApp(t, c, "shop")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, subj := range []string{"$KV.jetway_apis.*", "$KV.jetway_apis.x.>", "$KV.jetway_apps.*", "$KV.jetway_flags.degrade.*", "$KV.jetway_alerts.>"} {
		// A JetStream publish: acknowledged once stored.
		if _, err := js.Publish(ctx, subj, entry("good", "/hijack")); err != nil {
			t.Fatalf("raw publish on %s: %v", subj, err)
		}
	}

	es, err := c.List(ctx)
	if err != nil {
		t.Fatalf("api list: %v", err)
	}
	var names, bad []string
	for _, e := range es {
		names = append(names, e.Name)
		if e.Err != nil {
			bad = append(bad, e.Name)
			if !strings.Contains(e.Err.Error(), "not a valid key") {
				t.Errorf("key %q: %v", e.Name, e.Err)
			}
		} else if e.Revision == 0 || len(e.Value) == 0 {
			t.Errorf("valid entry %q without value", e.Name)
		}
	}
	if !slices.Equal(names, []string{"*", "good", "x.>"}) || !slices.Equal(bad, []string{"*", "x.>"}) {
		t.Fatalf("api list: names %q, invalid %q", names, bad)
	}

	apps, err := c.ListApps(ctx)
	checkListed(t, "app list", apps, err, []string{"*", "shop"}, 1)

	ds, err := c.ListDegrade(ctx)
	checkListed(t, "degrade list", ds, err, []string{"degrade.*"}, 1)

	rs, err := c.ListAlerts(ctx)
	checkListed(t, "alert list", rs, err, []string{">"}, 1)
}

// Two APIs published on one route at the same moment: exactly one wins,
// the other is refused naming it, and a third API elsewhere written at the
// same time is not held up. The route check reads the whole bucket, so the
// write is a compare-and-set on the whole bucket.
func TestConcurrentPutsOnOneRouteRefuseOne(t *testing.T) {
	s := natstest.RunServer(t)
	cs := clients(t, s, 3)
	ctx := context.Background()
	for round := range 20 {
		path := fmt.Sprintf("/r%d/{x}", round)
		doc := func(name, path string) []byte {
			return fmt.Appendf(nil, `{"name":%q,"pool":"p","route":{"path":%q},"backend":{"type":"mock"}}`, name, path)
		}
		var errA, errB, errC error
		together(
			func() { _, errA = cs[0].Put(ctx, doc(fmt.Sprintf("a%d.hello", round), path)) },
			func() { _, errB = cs[1].Put(ctx, doc(fmt.Sprintf("b%d.hello", round), path)) },
			func() { _, errC = cs[2].Put(ctx, doc(fmt.Sprintf("c%d.other", round), fmt.Sprintf("/o%d", round))) },
		)
		if errC != nil {
			t.Fatalf("round %d: the API on its own route: %v", round, errC)
		}
		var rc *registry.RouteConflictError
		switch {
		case errA == nil && errB == nil:
			t.Fatalf("round %d: both APIs on %s were published", round, path)
		case errA != nil && errB != nil:
			t.Fatalf("round %d: neither was published: %v / %v", round, errA, errB)
		case !errors.As(errors.Join(errA, errB), &rc):
			t.Fatalf("round %d: the loser's error is not a route conflict: %v %v", round, errA, errB)
		}
	}
}

// checkListed checks a listing of keys: the keys, in order, and how many of
// them are marked invalid.
func checkListed[T any](t *testing.T, what string, es []registry.Listed[T], err error, want []string, wantBad int) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	var keys []string
	bad := 0
	for _, e := range es {
		keys = append(keys, e.Key)
		if e.Err != nil {
			bad++
		}
	}
	if !slices.Equal(keys, want) || bad != wantBad {
		t.Errorf("%s: keys %q with %d invalid, want %q with %d", what, keys, bad, want, wantBad)
	}
}
