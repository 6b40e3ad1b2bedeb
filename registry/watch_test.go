package registry_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/registry"
)

func entry(name, path string) []byte {
	return fmt.Appendf(nil, `{"name":%q,"pool":"p","route":{"path":%q},"backend":{"type":"mock","body":%q}}`, name, path, path)
}

func startWatcher(t *testing.T, nc *nats.Conn, file string) *registry.Watcher {
	t.Helper()
	w := registry.NewWatcher(registry.WatcherOptions{Conn: nc, SnapshotFile: file})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = w.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

func rawKV(t *testing.T, nc *nats.Conn) jetstream.KeyValue {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := registry.OpenAPIs(context.Background(), js, registry.BucketOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

func bodyOf(w *registry.Watcher, name string) string {
	a := w.Current().APIs[name]
	if a == nil || a.Backend.Body == nil {
		return ""
	}
	return *a.Backend.Body
}

func TestWatcherFollowsChanges(t *testing.T) {
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	ctx := context.Background()
	c, err := registry.NewClient(ctx, nc, registry.BucketOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, entry("a", "/a")); err != nil {
		t.Fatal(err)
	}
	w := startWatcher(t, natstest.Connect(t, s), "")
	if err := w.WaitLive(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if ok, reason := w.Ready(); !ok {
		t.Fatalf("not ready: %s", reason)
	}
	if bodyOf(w, "a") != "/a" {
		t.Fatalf("initial entry not loaded: %+v", w.Current().APIs)
	}
	// put, update, delete are applied live.
	if _, err := c.Put(ctx, entry("b", "/b")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, entry("a", "/a2")); err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 2*time.Second, 5*time.Millisecond, func() error {
		if bodyOf(w, "a") != "/a2" || bodyOf(w, "b") != "/b" {
			return fmt.Errorf("snapshot %v", w.Current().APIs)
		}
		return nil
	})
	if err := c.Delete(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 2*time.Second, 5*time.Millisecond, func() error {
		if _, ok := w.Current().APIs["b"]; ok {
			return errors.New("b still present")
		}
		return nil
	})
	// rollback to the first revision of a.
	hs, err := c.History(ctx, "a")
	if err != nil || len(hs) != 2 {
		t.Fatalf("history %v %v", hs, err)
	}
	if _, err := c.Rollback(ctx, "a", hs[0].Revision); err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 2*time.Second, 5*time.Millisecond, func() error {
		if got := bodyOf(w, "a"); got != "/a" {
			return fmt.Errorf("a = %q after rollback", got)
		}
		return nil
	})
	if _, err := c.Rollback(ctx, "b", 999); !errors.Is(err, registry.ErrNotFound) {
		t.Errorf("rollback to missing revision: %v", err)
	}
}

// An invalid value written straight into KV is skipped: the last good
// version stays in force, other keys are unaffected. A node starting fresh
// finds the last good version in the key's history.
func TestWatcherKeepsLastGood(t *testing.T) {
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	kv := rawKV(t, nc)
	ctx := context.Background()
	if _, err := kv.Put(ctx, "a", entry("a", "/a")); err != nil {
		t.Fatal(err)
	}
	w := startWatcher(t, natstest.Connect(t, s), "")
	if err := w.WaitLive(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]byte{[]byte(`{not json`), []byte(`{"name":"a","pool":"p"}`), entry("other-name", "/x")} {
		if _, err := kv.Put(ctx, "a", bad); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := kv.Put(ctx, "c", entry("c", "/c")); err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 2*time.Second, 5*time.Millisecond, func() error {
		if bodyOf(w, "c") != "/c" {
			return errors.New("c not loaded")
		}
		return nil
	})
	if got := bodyOf(w, "a"); got != "/a" {
		t.Fatalf("a = %q, want last good /a", got)
	}
	// A fresh watcher, whose only view of "a" is the invalid newest value.
	w2 := startWatcher(t, natstest.Connect(t, s), "")
	if err := w2.WaitLive(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := bodyOf(w2, "a"); got != "/a" {
		t.Fatalf("fresh watcher: a = %q, want last good /a from history", got)
	}
	// An invalid entry with no good version at all is simply absent.
	if _, err := kv.Put(ctx, "d", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	w3 := startWatcher(t, natstest.Connect(t, s), "")
	if err := w3.WaitLive(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, ok := w3.Current().APIs["d"]; ok {
		t.Fatal("invalid d was loaded")
	}
}

// The local snapshot file lets a node serve when NATS is unreachable at
// start; it catches up once NATS is there.
func TestWatcherSnapshotFile(t *testing.T) {
	port, storeDir := natstest.FreePort(t), t.TempDir()
	opts := natstest.DefaultOptions(t)
	opts.Port, opts.StoreDir = port, storeDir
	s := natstest.RunServerWithOptions(t, opts)
	file := filepath.Join(t.TempDir(), "registry.json")
	{
		nc := natstest.Connect(t, s)
		c, err := registry.NewClient(context.Background(), nc, registry.BucketOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Put(context.Background(), entry("a", "/a")); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		w := registry.NewWatcher(registry.WatcherOptions{Conn: natstest.Connect(t, s), SnapshotFile: file})
		done := make(chan struct{})
		go func() { _ = w.Run(ctx); close(done) }()
		natstest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
			_, err := os.Stat(file)
			return err
		})
		if fi, err := os.Stat(file); err != nil {
			t.Error(err)
		} else if fi.Mode().Perm() != 0o600 {
			t.Errorf("snapshot file has mode %v; it holds signing secrets: 0600", fi.Mode())
		}
		cancel()
		<-done
	}
	url := s.ClientURL()
	s.Shutdown()
	s.WaitForShutdown()

	nc, err := nats.Connect(url, nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	w := startWatcher(t, nc, file)
	natstest.CheckFor(t, 2*time.Second, 5*time.Millisecond, func() error {
		if w.Current().Source != registry.SourceFile || bodyOf(w, "a") != "/a" {
			return fmt.Errorf("not serving from file: %v", w.Current().Source)
		}
		return nil
	})
	if ok, reason := w.Ready(); ok || reason == "" {
		t.Fatalf("ready=%v reason=%q while nats is down", ok, reason)
	}
	// NATS comes back with its data: the watcher goes live.
	opts = natstest.DefaultOptions(t)
	opts.Port, opts.StoreDir = port, storeDir
	natstest.RunServerWithOptions(t, opts)
	natstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if ok, reason := w.Ready(); !ok {
			return errors.New(reason)
		}
		return nil
	})
	if bodyOf(w, "a") != "/a" {
		t.Fatal("entry lost after going live")
	}
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// A NATS restart while the watch runs: changes made after it still arrive.
func TestWatcherSurvivesNATSRestart(t *testing.T) {
	port, storeDir := natstest.FreePort(t), t.TempDir()
	run := func() *server.Server {
		opts := natstest.DefaultOptions(t)
		opts.Port, opts.StoreDir = port, storeDir
		return natstest.RunServerWithOptions(t, opts)
	}
	s := run()
	nc, err := nats.Connect(s.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	w := startWatcher(t, nc, "")
	if err := w.WaitLive(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	s.Shutdown()
	s.WaitForShutdown()
	s = run()
	cnc := natstest.Connect(t, s)
	c, err := registry.NewClient(context.Background(), cnc, registry.BucketOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(context.Background(), entry("after", "/after")); err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 15*time.Second, 20*time.Millisecond, func() error {
		if bodyOf(w, "after") != "/after" {
			return errors.New("change after restart not seen")
		}
		if ok, reason := w.Ready(); !ok {
			return errors.New(reason)
		}
		return nil
	})
}

// Degrade switches in jetway_flags are part of the snapshot; an invalid one
// is skipped, the last good one stays, and the local file carries them.
func TestWatcherDegradeSwitches(t *testing.T) {
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	ctx := context.Background()
	c, err := registry.NewClient(ctx, nc, registry.BucketOptions{})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "registry.json")
	w := startWatcher(t, natstest.Connect(t, s), file)
	if err := w.WaitLive(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetDegrade(ctx, "orders.get", &registry.Degrade{On: true, Reason: "migration"}); err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 2*time.Second, 5*time.Millisecond, func() error {
		if d := w.Current().Degrade["orders.get"]; d == nil || d.Reason != "migration" || d.API != "orders.get" {
			return fmt.Errorf("switch not applied: %v", w.Current().Degrade)
		}
		return nil
	})
	// Invalid values written straight into KV keep the last good switch.
	js, _ := jetstream.New(nc)
	flags, err := registry.OpenFlags(ctx, js, registry.BucketOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for key, val := range map[string]string{
		"degrade.orders.get": `{"on":"yes"}`,
		"nonsense.key":       `{"on":true}`,
	} {
		if _, err := flags.Put(ctx, key, []byte(val)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.SetDegrade(ctx, "other", &registry.Degrade{On: false}); err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 2*time.Second, 5*time.Millisecond, func() error {
		if len(w.Current().Degrade) != 1 || w.Current().Degrade["orders.get"] == nil {
			return fmt.Errorf("switches %v", w.Current().Degrade)
		}
		b, err := os.ReadFile(file)
		if err != nil || !strings.Contains(string(b), `"degrade.orders.get"`) {
			return fmt.Errorf("snapshot file not written yet: %v", err)
		}
		return nil
	})
	// The file carries the switch to a node that starts without NATS.
	w2 := startWatcher(t, nil, file)
	natstest.CheckFor(t, 2*time.Second, 5*time.Millisecond, func() error {
		if w2.Current().Source != registry.SourceFile || w2.Current().Degrade["orders.get"] == nil {
			return fmt.Errorf("file snapshot: %v %v", w2.Current().Source, w2.Current().Degrade)
		}
		return nil
	})
	// Off: deleting the switch restores the API.
	if err := c.ClearDegrade(ctx, "orders.get"); err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 2*time.Second, 5*time.Millisecond, func() error {
		if len(w.Current().Degrade) != 0 {
			return fmt.Errorf("switches %v", w.Current().Degrade)
		}
		return nil
	})
	es, err := c.ListDegrade(ctx)
	if err != nil || len(es) != 2 { // "other" (off) and the invalid "nonsense.key"
		t.Fatalf("list %+v %v", es, err)
	}
}
