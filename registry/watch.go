package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
)

// Source says where a snapshot's entries came from.
type Source int

const (
	// SourceNone: nothing loaded yet.
	SourceNone Source = iota
	// SourceFile: the local snapshot file; NATS has not been reached yet.
	SourceFile
	// SourceLive: the KV bucket, watched live.
	SourceLive
)

func (s Source) String() string {
	switch s {
	case SourceFile:
		return "file"
	case SourceLive:
		return "live"
	}
	return "none"
}

// Snapshot is an immutable view of the registry. The hot path loads the
// current one through an atomic pointer; nothing in it is ever modified
// after it is published.
type Snapshot struct {
	// Revision is the newest KV revision among the entries (0 when empty).
	Revision uint64
	// APIs by name.
	APIs map[string]*API
	// Source of the entries.
	Source Source
}

// Sorted returns the APIs ordered by name.
func (s *Snapshot) Sorted() []*API {
	out := slices.Collect(maps.Values(s.APIs))
	slices.SortFunc(out, func(a, b *API) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out
}

// WatcherOptions configure a Watcher.
type WatcherOptions struct {
	// Conn is the NATS connection; it may still be connecting.
	Conn *nats.Conn
	// SnapshotFile, when set, is loaded at start (so the node can serve if
	// NATS is unreachable) and rewritten after every live change.
	SnapshotFile string
	// Bucket options used if the bucket has to be created.
	Bucket BucketOptions
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// Watcher keeps the current Snapshot of the API bucket. Create it with
// NewWatcher, register OnChange callbacks, then call Run.
type Watcher struct {
	o   WatcherOptions
	log *slog.Logger
	cur atomic.Pointer[Snapshot]

	subs []func(*Snapshot)

	// good is the last good entry per key; only the Run goroutine touches it.
	good map[string]*API

	saveCh chan struct{}

	mu      sync.Mutex // guards lastErr (read by Ready)
	lastErr error
}

// NewWatcher returns a watcher with an empty snapshot.
func NewWatcher(o WatcherOptions) *Watcher {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	w := &Watcher{o: o, log: log, good: map[string]*API{}, saveCh: make(chan struct{}, 1)}
	w.cur.Store(&Snapshot{APIs: map[string]*API{}})
	return w
}

// OnChange registers f to be called with every new snapshot, in order, from
// the watcher's goroutine. Register before Run. f must not block for long:
// it delays the next snapshot.
func (w *Watcher) OnChange(f func(*Snapshot)) { w.subs = append(w.subs, f) }

// Current returns the snapshot in force. It never blocks.
func (w *Watcher) Current() *Snapshot { return w.cur.Load() }

// Ready reports whether the registry is loaded live from NATS and the
// connection is up; otherwise it says why not.
func (w *Watcher) Ready() (bool, string) {
	s := w.Current()
	connected := w.o.Conn != nil && w.o.Conn.IsConnected()
	switch {
	case s.Source == SourceLive && connected:
		return true, fmt.Sprintf("registry live at revision %d (%d apis)", s.Revision, len(s.APIs))
	case s.Source == SourceFile:
		return false, fmt.Sprintf("serving from local snapshot (%d apis): nats not reachable", len(s.APIs))
	case !connected:
		return false, "not connected to nats"
	}
	w.mu.Lock()
	err := w.lastErr
	w.mu.Unlock()
	if err != nil {
		return false, "registry not loaded: " + err.Error()
	}
	return false, "registry not loaded yet"
}

// WaitLive blocks until the registry has been loaded from NATS at least once.
func (w *Watcher) WaitLive(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for w.Current().Source != SourceLive {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for registry: %w", ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// Run loads the local snapshot file, then watches the bucket until ctx ends,
// re-establishing the watch after any failure. It returns ctx's error.
func (w *Watcher) Run(ctx context.Context) error {
	if w.o.SnapshotFile != "" {
		if err := w.loadFile(); err != nil && !errors.Is(err, os.ErrNotExist) {
			w.log.Warn("ignoring local registry snapshot", "file", w.o.SnapshotFile, "err", err)
		}
		go w.saver(ctx)
	}
	const minBackoff = 100 * time.Millisecond
	backoff := minBackoff
	for ctx.Err() == nil {
		wentLive, err := w.watchOnce(ctx)
		if ctx.Err() != nil {
			break
		}
		if errors.Is(err, errReconnected) {
			// Re-watch at once: the server may have restarted, and an
			// ordered consumer would otherwise take seconds of missed
			// heartbeats to notice.
			w.log.Info("nats reconnected; re-watching registry")
			backoff = minBackoff
			continue
		}
		if wentLive {
			backoff = minBackoff
		}
		w.setErr(err)
		w.log.Warn("registry watch interrupted; retrying", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 3*time.Second)
	}
	return ctx.Err()
}

func (w *Watcher) setErr(err error) {
	w.mu.Lock()
	w.lastErr = err
	w.mu.Unlock()
}

var errReconnected = errors.New("nats reconnected")

// watchOnce opens the bucket, replays it and follows changes until the watch
// fails, the connection reconnects, or ctx ends. wentLive reports whether
// the replay completed.
func (w *Watcher) watchOnce(ctx context.Context) (wentLive bool, err error) {
	nc := w.o.Conn
	if nc == nil {
		return false, errors.New("no nats connection")
	}
	if !nc.IsConnected() {
		return false, bus.ErrNotConnected
	}
	reconnected := nc.StatusChanged(nats.CONNECTED)
	defer nc.RemoveStatusListener(reconnected)
	js, err := jetstream.New(nc)
	if err != nil {
		return false, err
	}
	octx, cancel := context.WithTimeout(ctx, 5*time.Second)
	kv, err := OpenAPIs(octx, js, w.o.Bucket)
	cancel()
	if err != nil {
		return false, err
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	watcher, err := kv.WatchAll(wctx)
	if err != nil {
		return false, fmt.Errorf("watching %s: %w", BucketAPIs, err)
	}
	defer watcher.Stop()

	fresh := map[string]*API{}
	var invalid []string
	initial := true
	for {
		var e jetstream.KeyValueEntry
		var ok bool
		select {
		case <-ctx.Done():
			return !initial, ctx.Err()
		case <-reconnected:
			return !initial, errReconnected
		case e, ok = <-watcher.Updates():
		}
		if !ok {
			return !initial, errors.New("watch closed")
		}
		if initial {
			if e == nil { // replay done
				for _, k := range invalid {
					if _, found := fresh[k]; !found {
						if a := w.fallback(ctx, kv, k); a != nil {
							fresh[k] = a
						}
					}
				}
				w.good, initial, invalid = fresh, false, nil
				w.setErr(nil)
				w.publish(SourceLive)
				continue
			}
			if w.apply(fresh, e) == errInvalid {
				invalid = append(invalid, e.Key())
			}
			continue
		}
		if e == nil {
			continue
		}
		w.apply(w.good, e)
		// Coalesce a burst of changes into one snapshot.
	drain:
		for {
			select {
			case e2, ok := <-watcher.Updates():
				if !ok {
					w.publish(SourceLive)
					return true, errors.New("watch closed")
				}
				if e2 != nil {
					w.apply(w.good, e2)
				}
			default:
				break drain
			}
		}
		w.publish(SourceLive)
	}
}

var errInvalid = errors.New("invalid entry")

// apply puts one KV change into m. An invalid value leaves m[key] as it was
// (the last good version stays in force) and is logged.
func (w *Watcher) apply(m map[string]*API, e jetstream.KeyValueEntry) error {
	key := e.Key()
	if e.Operation() != jetstream.KeyValuePut {
		delete(m, key)
		return nil
	}
	a, err := ParseAPI(key, e.Value())
	if err != nil {
		if prev, ok := w.good[key]; ok {
			m[key] = prev
		}
		w.log.Warn("skipping invalid registry entry; last good version stays in force",
			"bucket", BucketAPIs, "key", key, "revision", e.Revision(), "reason", err)
		return errInvalid
	}
	a.Revision = e.Revision()
	m[key] = a
	return nil
}

// fallback finds the newest valid revision of key in its history, for a key
// whose newest value is invalid and that this node has no good version of.
func (w *Watcher) fallback(ctx context.Context, kv jetstream.KeyValue, key string) *API {
	hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	hs, err := kv.History(hctx, key)
	if err != nil {
		return nil
	}
	for i := len(hs) - 1; i >= 0; i-- {
		if hs[i].Operation() != jetstream.KeyValuePut {
			return nil // deleted before: nothing good to fall back to
		}
		if a, err := ParseAPI(key, hs[i].Value()); err == nil {
			a.Revision = hs[i].Revision()
			w.log.Info("using last good revision of invalid entry", "key", key, "revision", a.Revision)
			return a
		}
	}
	return nil
}

// publish swaps in a snapshot of w.good and tells the subscribers.
func (w *Watcher) publish(src Source) {
	s := &Snapshot{APIs: maps.Clone(w.good), Source: src}
	for _, a := range s.APIs {
		s.Revision = max(s.Revision, a.Revision)
	}
	w.cur.Store(s)
	for _, f := range w.subs {
		f(s)
	}
	if src == SourceLive && w.o.SnapshotFile != "" {
		select {
		case w.saveCh <- struct{}{}:
		default:
		}
	}
}

// snapshotFile is the on-disk form of the last good registry.
type snapshotFile struct {
	SavedAt time.Time                `json:"saved_at"`
	APIs    map[string]snapshotEntry `json:"apis"`
}

type snapshotEntry struct {
	Revision uint64          `json:"revision"`
	Value    json.RawMessage `json:"value"`
}

func (w *Watcher) loadFile() error {
	b, err := os.ReadFile(w.o.SnapshotFile)
	if err != nil {
		return err
	}
	var f snapshotFile
	if err := json.Unmarshal(b, &f); err != nil {
		return fmt.Errorf("parsing %s: %w", w.o.SnapshotFile, err)
	}
	for key, e := range f.APIs {
		a, err := ParseAPI(key, e.Value)
		if err != nil {
			w.log.Warn("skipping invalid entry in local snapshot", "key", key, "reason", err)
			continue
		}
		a.Revision = e.Revision
		w.good[key] = a
	}
	// Only publish the file if NATS has not already given us a live view.
	if w.Current().Source == SourceNone {
		w.publish(SourceFile)
		w.log.Info("serving from local registry snapshot until nats is reached", "file", w.o.SnapshotFile, "apis", len(w.good))
	}
	return nil
}

// saver writes the snapshot file after changes, at most a few times a second.
func (w *Watcher) saver(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.saveCh:
		}
		if err := w.saveFile(w.Current()); err != nil {
			w.log.Warn("writing local registry snapshot", "file", w.o.SnapshotFile, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (w *Watcher) saveFile(s *Snapshot) error {
	f := snapshotFile{SavedAt: time.Now().UTC(), APIs: make(map[string]snapshotEntry, len(s.APIs))}
	for k, a := range s.APIs {
		f.APIs[k] = snapshotEntry{Revision: a.Revision, Value: a.Marshal()}
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(w.o.SnapshotFile)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".registry-*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), w.o.SnapshotFile)
}
