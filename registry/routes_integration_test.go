package registry_test

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/registry"
)

func helloEntry(name, param, timeout string) []byte {
	return fmt.Appendf(nil, `{"name":%q,"pool":"p","route":{"method":"GET","path":"/v1/hello/{%s}"},"backend":{"type":"mock","body":%q},"timeout":%q}`,
		name, param, name, timeout)
}

// waitRouting waits until w's snapshot holds the APIs at the given
// revisions and the route table built from it leaves exactly the APIs of
// unrouted without their routes, held by the named API.
func waitRouting(t *testing.T, w *registry.Watcher, revs map[string]uint64, unrouted map[string]string) {
	t.Helper()
	natstest.CheckFor(t, 3*time.Second, 5*time.Millisecond, func() error {
		s := w.Current()
		got := map[string]uint64{}
		for n, a := range s.APIs {
			got[n] = a.Revision
		}
		if !maps.Equal(got, revs) {
			return fmt.Errorf("snapshot has %v, want %v", got, revs)
		}
		if c := registry.Conflicts(slices.Collect(maps.Values(s.APIs))); !maps.Equal(c, unrouted) {
			return fmt.Errorf("unrouted %v, want %v", c, unrouted)
		}
		return nil
	})
}

func wantHeldBy(t *testing.T, err error, holder string) {
	t.Helper()
	var rc *registry.RouteConflictError
	if !errors.As(err, &rc) || rc.HeldBy != holder || !strings.Contains(err.Error(), holder) {
		t.Fatalf("err = %v, want a route conflict naming %s", err, holder)
	}
}

// The API published first on a route keeps it across its own edits and
// rollbacks, and every node agrees: one watching live, one starting fresh
// from KV, one starting from its local snapshot file. Put refuses a second
// API on the route; one written straight into KV stays unrouted.
func TestRouteHolderKeepsRouteAcrossEdits(t *testing.T) {
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	ctx := ctxTimeout(t, 20*time.Second)
	c, err := registry.NewClient(ctx, nc, registry.BucketOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kv := rawKV(t, nc)
	file := filepath.Join(t.TempDir(), "registry.json")
	w := startWatcher(t, natstest.Connect(t, s), file)
	if err := w.WaitLive(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, entry("other", "/other")); err != nil { // bumps revisions
		t.Fatal(err)
	}
	first, err := c.Put(ctx, helloEntry("demo.hello", "name", "2s"))
	if err != nil {
		t.Fatal(err)
	}
	if first.Created != first.Revision {
		t.Fatalf("a new API is created at its own revision: %+v", first)
	}

	_, err = c.Put(ctx, helloEntry("dup.hello", "x", "2s"))
	wantHeldBy(t, err, "demo.hello")
	if _, err := kv.Get(ctx, "dup.hello"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("a refused put was written: %v", err)
	}
	dupRev, err := kv.Put(ctx, "dup.hello", helloEntry("dup.hello", "x", "2s"))
	if err != nil {
		t.Fatal(err)
	}
	revs := map[string]uint64{"other": 1, "demo.hello": first.Revision, "dup.hello": dupRev}
	unrouted := map[string]string{"dup.hello": "demo.hello"}
	waitRouting(t, w, revs, unrouted)

	// An edit of the holder: it keeps the route (the bug: the newer
	// revision lost it to dup.hello).
	edited, err := c.Put(ctx, helloEntry("demo.hello", "name", "3s"))
	if err != nil {
		t.Fatal(err)
	}
	if edited.Created != first.Revision {
		t.Fatalf("edit created at %d, want %d", edited.Created, first.Revision)
	}
	revs["demo.hello"] = edited.Revision
	waitRouting(t, w, revs, unrouted)
	if e, err := c.Get(ctx, "demo.hello"); err != nil || !strings.Contains(string(e.Value), fmt.Sprintf(`"created_revision":%d`, first.Revision)) {
		t.Fatalf("stored edit %s, %v: want the created revision in it", e.Value, err)
	}

	// A rollback to the first revision, which has no created_revision.
	rb, err := c.Rollback(ctx, "demo.hello", first.Revision)
	if err != nil {
		t.Fatal(err)
	}
	revs["demo.hello"] = rb.Revision
	waitRouting(t, w, revs, unrouted)

	// The unrouted API cannot be edited into its conflict through Put, and
	// the holder cannot be moved onto another API's route.
	_, err = c.Put(ctx, helloEntry("dup.hello", "y", "5s"))
	wantHeldBy(t, err, "demo.hello")
	_, err = c.Put(ctx, []byte(`{"name":"demo.hello","pool":"p","route":{"path":"/other"},"backend":{"type":"mock"}}`))
	wantHeldBy(t, err, "other")

	// A node starting fresh from KV.
	fresh := startWatcher(t, natstest.Connect(t, s), "")
	if err := fresh.WaitLive(ctx); err != nil {
		t.Fatal(err)
	}
	waitRouting(t, fresh, revs, unrouted)

	// A node starting from the local snapshot file, without NATS.
	natstest.CheckFor(t, 3*time.Second, 10*time.Millisecond, func() error {
		b, err := os.ReadFile(file)
		if err != nil || !strings.Contains(string(b), fmt.Sprintf(`"revision": %d`, rb.Revision)) {
			return fmt.Errorf("snapshot file not written yet: %v", err)
		}
		return nil
	})
	offline := startWatcher(t, nil, file)
	waitRouting(t, offline, revs, unrouted)
	if src := offline.Current().Source; src != registry.SourceFile {
		t.Fatalf("source %v", src)
	}
}

// A deleted and republished API is a new publication: it loses to the API
// that took the route meanwhile, through Put and straight into KV alike.
func TestRouteHolderDeleteThenRepublish(t *testing.T) {
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	ctx := ctxTimeout(t, 20*time.Second)
	c, err := registry.NewClient(ctx, nc, registry.BucketOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kv := rawKV(t, nc)
	w := startWatcher(t, natstest.Connect(t, s), "")
	if err := w.WaitLive(ctx); err != nil {
		t.Fatal(err)
	}
	first, err := c.Put(ctx, helloEntry("demo.hello", "name", "2s"))
	if err != nil {
		t.Fatal(err)
	}
	edited, err := c.Put(ctx, helloEntry("demo.hello", "name", "3s"))
	if err != nil {
		t.Fatal(err)
	}
	dupRev, err := kv.Put(ctx, "dup.hello", helloEntry("dup.hello", "x", "2s"))
	if err != nil {
		t.Fatal(err)
	}
	waitRouting(t, w, map[string]uint64{"demo.hello": edited.Revision, "dup.hello": dupRev}, map[string]string{"dup.hello": "demo.hello"})

	if err := c.Delete(ctx, "demo.hello"); err != nil {
		t.Fatal(err)
	}
	waitRouting(t, w, map[string]uint64{"dup.hello": dupRev}, map[string]string{})

	// Republished through Put, or rolled back to a revision before the
	// deletion: refused, dup.hello holds the route now.
	_, err = c.Put(ctx, helloEntry("demo.hello", "name", "2s"))
	wantHeldBy(t, err, "dup.hello")
	_, err = c.Rollback(ctx, "demo.hello", first.Revision)
	wantHeldBy(t, err, "dup.hello")
	// The holder's own edits go through.
	dupEdit, err := c.Put(ctx, helloEntry("dup.hello", "x", "4s"))
	if err != nil {
		t.Fatal(err)
	}
	if dupEdit.Created != dupRev {
		t.Fatalf("dup.hello created at %d, want %d", dupEdit.Created, dupRev)
	}
	// Republished straight into KV, with the value it had: not routed.
	rev, err := kv.Put(ctx, "demo.hello", helloEntry("demo.hello", "name", "2s"))
	if err != nil {
		t.Fatal(err)
	}
	revs := map[string]uint64{"demo.hello": rev, "dup.hello": dupEdit.Revision}
	unrouted := map[string]string{"demo.hello": "dup.hello"}
	waitRouting(t, w, revs, unrouted)
	fresh := startWatcher(t, natstest.Connect(t, s), "")
	if err := fresh.WaitLive(ctx); err != nil {
		t.Fatal(err)
	}
	waitRouting(t, fresh, revs, unrouted)

	// Once dup.hello is gone, demo.hello holds the route again, and its
	// edits keep the created revision of its republication.
	if err := c.Delete(ctx, "dup.hello"); err != nil {
		t.Fatal(err)
	}
	again, err := c.Put(ctx, helloEntry("demo.hello", "name", "5s"))
	if err != nil {
		t.Fatal(err)
	}
	if again.Created != rev {
		t.Fatalf("demo.hello created at %d, want %d (its republication)", again.Created, rev)
	}
	waitRouting(t, w, map[string]uint64{"demo.hello": again.Revision}, map[string]string{})
}

// A created revision above the entry's own is refused: a hand-written entry
// cannot claim a route it never held with an invented history.
func TestCreatedRevisionFromTheFutureRefused(t *testing.T) {
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	ctx := ctxTimeout(t, 10*time.Second)
	kv := rawKV(t, nc)
	w := startWatcher(t, natstest.Connect(t, s), "")
	if err := w.WaitLive(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "a", []byte(`{"name":"a","pool":"p","route":{"path":"/a"},"backend":{"type":"mock"},"created_revision":99}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "b", entry("b", "/b")); err != nil {
		t.Fatal(err)
	}
	waitRouting(t, w, map[string]uint64{"b": 2}, map[string]string{})
}
