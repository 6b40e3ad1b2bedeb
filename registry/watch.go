package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
	// Revision is the newest KV revision among the APIs (0 when empty).
	Revision uint64
	// APIs by name.
	APIs map[string]*API
	// Drafts holds the drafts (draft.go), by the name of their API.
	Drafts map[string]*API
	// Degrade holds the degrade switches that are on, by API name.
	Degrade map[string]*Degrade
	// Faults holds the fault switches, by API name (each off once it
	// expires: Fault.Expired).
	Faults map[string]*Fault
	// Alerts holds the alert rules, by name.
	Alerts map[string]*AlertRule
	// Apps holds the apps, by id.
	Apps map[string]*App
	// Certs holds the edges' TLS certificates, by name.
	Certs map[string]*Cert
	// JSONSchemas holds the schemas request validations share, by name.
	JSONSchemas map[string]*JSONSchema
	// Topics holds the push topics, by name.
	Topics map[string]*Topic
	// Source of the entries.
	Source Source
}

// Sorted returns the APIs ordered by name.
func (s *Snapshot) Sorted() []*API {
	out := slices.Collect(maps.Values(s.APIs))
	slices.SortFunc(out, func(a, b *API) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// WatcherOptions configure a Watcher.
type WatcherOptions struct {
	// Conn is the NATS connection; it may still be connecting.
	Conn *nats.Conn
	// SnapshotFile, when set, is loaded at start (so the node can serve if
	// NATS is unreachable) and rewritten after every live change.
	SnapshotFile string
	// Bucket options used if a bucket has to be created.
	Bucket BucketOptions
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Buckets are the buckets to watch, among BucketAPIs, BucketFlags,
	// BucketAlerts, BucketApps and BucketCerts; nil watches them all. A worker watches
	// only the APIs and flags: its NATS user may not read the apps (they
	// hold the signing secrets) nor the alert rules. The snapshot of a
	// bucket not watched stays empty.
	Buckets []string
}

// Watcher keeps the current Snapshot of the registry buckets (jetway_apis,
// jetway_flags, jetway_alerts and jetway_apps, or those of
// WatcherOptions.Buckets). Create it with NewWatcher, register OnChange
// callbacks, then call Run.
type Watcher struct {
	o   WatcherOptions
	log *slog.Logger
	cur atomic.Pointer[Snapshot]

	subs []func(*Snapshot)

	// mu orders publishing between the buckets' watch loops and guards what
	// they share. Requests never take it: they read cur.
	mu          sync.Mutex
	apis        *kvSet[*API]
	flags       *kvSet[*Switch]
	alerts      *kvSet[*AlertRule]
	apps        *kvSet[*App]
	certs       *kvSet[*Cert]
	jsonSch     *kvSet[*JSONSchema]
	topics      *kvSet[*Topic]
	fromFile    bool
	fileSavedAt time.Time // when the snapshot file loaded was written
	lastErr     error

	// Health (health.go), under mu: when Run started, the probe's last
	// error and since when it fails, and the channel closed to make every
	// set watch again (when JetStream answers again after an outage).
	started    time.Time
	probeErr   error
	probeSince time.Time
	rewatch    chan struct{}

	saveCh chan struct{}
}

// kvSet is one watched bucket: the last good entry per key.
type kvSet[T any] struct {
	open  func(context.Context, jetstream.JetStream, BucketOptions) (jetstream.KeyValue, error)
	name  string
	parse func(key string, val []byte, rev uint64) (T, error)
	// parseAt, when set, is parse with the time the value was written
	// (zero: unknown).
	parseAt func(key string, val []byte, rev uint64, created time.Time) (T, error)
	// good is written only by the set's own watch loop, under Watcher.mu.
	good map[string]T
	live bool
	// optional sets never hold the snapshot back (the certificates: a
	// cluster made before them may lack the bucket); their retries slow
	// down to a minute.
	optional bool
	// err is why the set's watch failed last, since errSince; nil once
	// it replays again. Under Watcher.mu.
	err      error
	errSince time.Time
}

// NewWatcher returns a watcher with an empty snapshot.
func NewWatcher(o WatcherOptions) *Watcher {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	w := &Watcher{o: o, log: log, saveCh: make(chan struct{}, 1), rewatch: make(chan struct{})}
	w.apis = &kvSet[*API]{open: OpenAPIs, name: BucketAPIs, good: map[string]*API{},
		parse: parseAPIAt}
	w.flags = &kvSet[*Switch]{open: OpenFlags, name: BucketFlags, good: map[string]*Switch{}, parseAt: ParseSwitchAt}
	w.alerts = &kvSet[*AlertRule]{open: OpenAlerts, name: BucketAlerts, good: map[string]*AlertRule{},
		parse: func(key string, val []byte, rev uint64) (*AlertRule, error) {
			r, err := ParseAlert(key, val)
			if err == nil {
				r.Revision = rev
			}
			return r, err
		}}
	w.apps = &kvSet[*App]{open: OpenApps, name: BucketApps, good: map[string]*App{},
		parse: func(key string, val []byte, rev uint64) (*App, error) {
			a, err := ParseApp(key, val)
			if err == nil {
				a.Revision = rev
			}
			return a, err
		}}
	w.certs = &kvSet[*Cert]{open: OpenCerts, name: BucketCerts, good: map[string]*Cert{}, optional: true,
		parse: func(key string, val []byte, rev uint64) (*Cert, error) {
			c, err := ParseCert(key, val)
			if err == nil {
				c.Revision = rev
			}
			return c, err
		}}
	// Optional too: an edge user of an older cluster may not read it, and
	// only the validations that reference a shared schema need it.
	w.jsonSch = &kvSet[*JSONSchema]{open: OpenJSONSchemas, name: BucketJSONSchemas, good: map[string]*JSONSchema{}, optional: true,
		parse: func(key string, val []byte, rev uint64) (*JSONSchema, error) {
			s, err := ParseJSONSchema(key, val)
			if err == nil {
				s.Revision = rev
			}
			return s, err
		}}
	// Optional: a cluster made before push has no jetway_topics bucket,
	// which an edge's user may not create; only push needs it.
	w.topics = &kvSet[*Topic]{open: OpenTopics, name: BucketTopics, good: map[string]*Topic{}, optional: true,
		parse: func(key string, val []byte, rev uint64) (*Topic, error) {
			t, err := ParseTopic(key, val)
			if err == nil {
				t.Revision = rev
			}
			return t, err
		}}
	w.cur.Store(&Snapshot{APIs: map[string]*API{}, Degrade: map[string]*Degrade{}, Faults: map[string]*Fault{}, Alerts: map[string]*AlertRule{}, Apps: map[string]*App{}, Certs: map[string]*Cert{}, JSONSchemas: map[string]*JSONSchema{}, Topics: map[string]*Topic{}})
	return w
}

// OnChange registers f to be called with every new snapshot, in order. It
// is called from a watcher goroutine; register before Run. f must not
// block for long: it delays the next snapshot.
func (w *Watcher) OnChange(f func(*Snapshot)) { w.subs = append(w.subs, f) }

// Current returns the snapshot in force. It never blocks.
func (w *Watcher) Current() *Snapshot { return w.cur.Load() }

// Ready reports whether the registry follows NATS live; otherwise it says
// why not (Health's Reason).
func (w *Watcher) Ready() (bool, string) {
	h := w.Health()
	if h.Live {
		s := w.Current()
		return true, fmt.Sprintf("registry live at revision %d (%d apis, %d degraded)", s.Revision, len(s.APIs), len(s.Degrade))
	}
	return false, h.Reason
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

// Run loads the local snapshot file, then watches each bucket of
// WatcherOptions.Buckets (all four by default) until ctx ends,
// re-establishing a watch after any failure. It returns ctx's error.
func (w *Watcher) Run(ctx context.Context) error {
	if w.o.SnapshotFile != "" {
		if err := w.loadFile(); err != nil && !errors.Is(err, os.ErrNotExist) {
			w.log.Warn("ignoring local registry snapshot", "file", w.o.SnapshotFile, "err", err)
		}
		go w.saver(ctx)
	}
	w.mu.Lock()
	w.started = time.Now()
	w.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); w.probe(ctx) }()
	run := func(name string, f func()) {
		if w.watches(name) {
			wg.Add(1)
			go func() { defer wg.Done(); f() }()
		}
	}
	run(BucketAPIs, func() { runSet(ctx, w, w.apis) })
	run(BucketFlags, func() { runSet(ctx, w, w.flags) })
	run(BucketAlerts, func() { runSet(ctx, w, w.alerts) })
	run(BucketApps, func() { runSet(ctx, w, w.apps) })
	run(BucketCerts, func() { runSet(ctx, w, w.certs) })
	run(BucketJSONSchemas, func() { runSet(ctx, w, w.jsonSch) })
	run(BucketTopics, func() { runSet(ctx, w, w.topics) })
	wg.Wait()
	return ctx.Err()
}

// watches reports whether the watcher follows the bucket.
func (w *Watcher) watches(bucket string) bool {
	return w.o.Buckets == nil || slices.Contains(w.o.Buckets, bucket)
}

// runSet keeps one bucket watched until ctx ends.
func runSet[T any](ctx context.Context, w *Watcher, s *kvSet[T]) {
	backoff := watchMinBackoff
	for ctx.Err() == nil {
		wentLive, err := watchSet(ctx, w, s)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errReconnected) || errors.Is(err, errRewatch) {
			// Re-watch at once: the server may have restarted, or
			// JetStream answers again after an outage, and an ordered
			// consumer would otherwise take seconds of missed heartbeats
			// (and its own backoff) to notice.
			w.log.Info("re-watching registry", "bucket", s.name, "why", err)
			backoff = watchMinBackoff
			continue
		}
		if wentLive {
			backoff = watchMinBackoff
		}
		maxBackoff := watchMaxBackoff
		w.mu.Lock()
		if s.err == nil {
			s.errSince = time.Now()
		}
		s.err = err
		w.mu.Unlock()
		if s.optional {
			maxBackoff = time.Minute
		} else {
			w.setErr(err) // an optional bucket's trouble is not the registry's
		}
		w.log.Warn("registry watch interrupted; retrying", "bucket", s.name, "err", err, "in", backoff)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

func (w *Watcher) setErr(err error) {
	w.mu.Lock()
	w.lastErr = err
	w.mu.Unlock()
}

var (
	errReconnected = errors.New("nats reconnected")
	errRewatch     = errors.New("jetstream answers again")
)

// How a broken watch is re-established: short attempts, retried quickly, so
// that a node follows the registry again within a second of JetStream
// answering (a cluster regaining quorum).
const (
	watchOpenTimeout = time.Second
	watchMinBackoff  = 50 * time.Millisecond
	watchMaxBackoff  = 250 * time.Millisecond
)

// watchSet opens a bucket, replays it and follows changes until the watch
// fails, the connection reconnects, or ctx ends. wentLive reports whether
// the replay completed.
func watchSet[T any](ctx context.Context, w *Watcher, s *kvSet[T]) (wentLive bool, err error) {
	nc := w.o.Conn
	if nc == nil {
		return false, errors.New("no nats connection")
	}
	if !nc.IsConnected() {
		return false, bus.ErrNotConnected
	}
	reconnected := nc.StatusChanged(nats.CONNECTED)
	defer nc.RemoveStatusListener(reconnected)
	w.mu.Lock()
	rewatch := w.rewatch
	w.mu.Unlock()
	js, err := jetstream.New(nc)
	if err != nil {
		return false, err
	}
	octx, cancel := context.WithTimeout(ctx, watchOpenTimeout)
	kv, err := s.open(octx, js, w.o.Bucket)
	cancel()
	if err != nil {
		return false, err
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	watcher, err := kv.WatchAll(wctx)
	if err != nil {
		return false, fmt.Errorf("watching %s: %w", s.name, err)
	}
	// Stopping deletes the server-side consumer with a JetStream API call
	// that waits up to 5 s when the server is gone; never hold up a
	// re-watch or a shutdown for it (the consumer is ephemeral anyway).
	defer func() { go func() { _ = watcher.Stop() }() }()

	// The replay builds a fresh set; keys absent from it were deleted while
	// this node was not watching.
	fresh := map[string]T{}
	var invalid []string
	for {
		var e jetstream.KeyValueEntry
		var ok bool
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-reconnected:
			return false, errReconnected
		case <-rewatch:
			return false, errRewatch
		case e, ok = <-watcher.Updates():
		}
		if !ok {
			return false, errors.New("watch closed")
		}
		if e == nil { // replay done
			break
		}
		if apply(w, s, fresh, e) != nil {
			invalid = append(invalid, e.Key())
		}
	}
	for _, k := range invalid {
		if _, found := fresh[k]; !found {
			if v, ok := fallback(ctx, w, s, kv, k); ok {
				fresh[k] = v
			}
		}
	}
	w.mu.Lock()
	s.good, s.live, w.lastErr = fresh, true, nil
	s.err, s.errSince = nil, time.Time{}
	w.publishLocked()
	w.mu.Unlock()

	for {
		var e jetstream.KeyValueEntry
		var ok bool
		select {
		case <-ctx.Done():
			return true, ctx.Err()
		case <-reconnected:
			return true, errReconnected
		case <-rewatch:
			return true, errRewatch
		case e, ok = <-watcher.Updates():
		}
		if !ok {
			return true, errors.New("watch closed")
		}
		if e == nil {
			continue
		}
		w.mu.Lock()
		_ = apply(w, s, s.good, e) // an invalid entry is logged and skipped
		// Coalesce a burst of changes into one snapshot.
	drain:
		for {
			select {
			case e2, ok := <-watcher.Updates():
				if !ok {
					break drain
				}
				if e2 != nil {
					_ = apply(w, s, s.good, e2)
				}
			default:
				break drain
			}
		}
		w.publishLocked()
		w.mu.Unlock()
	}
}

// apply puts one KV change into m. An invalid value leaves m[key] as it was
// (the last good version stays in force) and is logged.
func apply[T any](w *Watcher, s *kvSet[T], m map[string]T, e jetstream.KeyValueEntry) error {
	key := e.Key()
	if e.Operation() != jetstream.KeyValuePut {
		delete(m, key)
		return nil
	}
	v, err := s.parseEntry(key, e.Value(), e.Revision(), e.Created())
	if err != nil {
		if prev, ok := s.good[key]; ok {
			m[key] = prev
		}
		w.log.Warn("skipping invalid registry entry; last good version stays in force",
			"bucket", s.name, "key", key, "revision", e.Revision(), "reason", err)
		return err
	}
	m[key] = v
	return nil
}

// fallback finds the newest valid revision of key in its history, for a key
// whose newest value is invalid and that this node has no good version of.
func fallback[T any](ctx context.Context, w *Watcher, s *kvSet[T], kv jetstream.KeyValue, key string) (T, bool) {
	var zero T
	hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	hs, err := kv.History(hctx, key)
	if err != nil {
		return zero, false
	}
	v, e, ok := lastGood(hs, math.MaxUint64, func(e jetstream.KeyValueEntry) (T, error) {
		return s.parseEntry(key, e.Value(), e.Revision(), e.Created())
	})
	if ok {
		w.log.Info("using last good revision of invalid entry", "bucket", s.name, "key", key, "revision", e.Revision())
	}
	return v, ok
}

// lastGood finds, in a key's history (oldest first), the newest value
// below revision before that parse accepts, looking no further back than
// the key's last deletion: what every node serves for a key whose newer
// values are invalid.
func lastGood[T any](hs []jetstream.KeyValueEntry, before uint64, parse func(jetstream.KeyValueEntry) (T, error)) (T, jetstream.KeyValueEntry, bool) {
	var zero T
	for i := len(hs) - 1; i >= 0; i-- {
		e := hs[i]
		if e.Revision() >= before {
			continue
		}
		if e.Operation() != jetstream.KeyValuePut {
			break // deleted before: nothing good to fall back to
		}
		if v, err := parse(e); err == nil {
			return v, e, true
		}
	}
	return zero, nil, false
}

// publishLocked swaps in a snapshot of both sets and tells the
// subscribers. w.mu must be held.
func (w *Watcher) publishLocked() {
	src := SourceNone
	switch {
	case (w.apis.live || !w.watches(BucketAPIs)) && (w.flags.live || !w.watches(BucketFlags)) &&
		(w.alerts.live || !w.watches(BucketAlerts)) && (w.apps.live || !w.watches(BucketApps)):
		// The certificates never hold the registry back: a cluster made by
		// a release before them has no jetway_certs bucket, which an edge's
		// user may not create; its file certificates serve meanwhile.
		src = SourceLive
	case w.fromFile:
		src = SourceFile
	}
	s := &Snapshot{APIs: make(map[string]*API, len(w.apis.good)), Drafts: map[string]*API{}, Degrade: make(map[string]*Degrade), Faults: make(map[string]*Fault), Alerts: maps.Clone(w.alerts.good), Apps: maps.Clone(w.apps.good), Certs: maps.Clone(w.certs.good), JSONSchemas: maps.Clone(w.jsonSch.good), Topics: maps.Clone(w.topics.good), Source: src}
	for _, a := range w.apis.good {
		s.Revision = max(s.Revision, a.Revision)
		if a.IsDraft() {
			s.Drafts[a.Name] = a
		} else {
			s.APIs[a.Name] = a
		}
	}
	for _, sw := range w.flags.good {
		if d := sw.Degrade; d != nil && d.On {
			s.Degrade[d.API] = d
		}
		if f := sw.Fault; f != nil {
			s.Faults[f.API] = f
		}
	}
	// Subscribers first: once Current returns s, every subscriber has
	// applied it (the edge routes by it, workers serve it).
	for _, f := range w.subs {
		f(s)
	}
	w.cur.Store(s)
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
	Flags   map[string]snapshotEntry `json:"flags,omitempty"`
	Apps    map[string]snapshotEntry `json:"apps,omitempty"`
	Certs   map[string]snapshotEntry `json:"certs,omitempty"`
	// JSONSchemas are the shared schemas, each value the schema itself.
	JSONSchemas map[string]snapshotEntry `json:"json_schemas,omitempty"`
}

type snapshotEntry struct {
	Revision uint64          `json:"revision"`
	Value    json.RawMessage `json:"value"`
	Created  time.Time       `json:"created,omitzero"` // when it was written, where it matters (fault switches)
}

// parseEntry parses a value written at created (zero: unknown).
func (s *kvSet[T]) parseEntry(key string, val []byte, rev uint64, created time.Time) (T, error) {
	if s.parseAt != nil {
		return s.parseAt(key, val, rev, created)
	}
	return s.parse(key, val, rev)
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
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.apis.live || w.flags.live || w.alerts.live || w.apps.live || w.certs.live || w.jsonSch.live || w.topics.live {
		return nil // NATS got there first
	}
	loadEntries(w, w.apis, f.APIs)
	loadEntries(w, w.flags, f.Flags)
	if w.watches(BucketApps) {
		loadEntries(w, w.apps, f.Apps)
	}
	if w.watches(BucketCerts) {
		loadEntries(w, w.certs, f.Certs)
	}
	if w.watches(BucketJSONSchemas) {
		loadEntries(w, w.jsonSch, f.JSONSchemas)
	}
	w.fromFile = true
	w.fileSavedAt = f.SavedAt
	w.publishLocked()
	w.log.Info("serving from local registry snapshot until nats is reached", "file", w.o.SnapshotFile, "apis", len(w.apis.good))
	return nil
}

func loadEntries[T any](w *Watcher, s *kvSet[T], entries map[string]snapshotEntry) {
	for key, e := range entries {
		v, err := s.parseEntry(key, e.Value, e.Revision, e.Created)
		if err != nil {
			w.log.Warn("skipping invalid entry in local snapshot", "bucket", s.name, "key", key, "reason", err)
			continue
		}
		s.good[key] = v
	}
}

// saver writes the snapshot file after changes, at most a few times a second.
func (w *Watcher) saver(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.saveCh:
		}
		if err := w.saveFile(); err != nil {
			w.log.Warn("writing local registry snapshot", "file", w.o.SnapshotFile, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (w *Watcher) saveFile() error {
	s := w.Current()
	f := snapshotFile{SavedAt: time.Now().UTC(), APIs: make(map[string]snapshotEntry, len(s.APIs)+len(s.Drafts)), Flags: map[string]snapshotEntry{}}
	for _, a := range s.APIs {
		f.APIs[a.StoreKey()] = snapshotEntry{Revision: a.Revision, Value: a.Marshal()}
	}
	for _, d := range s.Drafts {
		f.APIs[d.StoreKey()] = snapshotEntry{Revision: d.Revision, Value: d.Marshal()}
	}
	for _, d := range s.Degrade {
		f.Flags[DegradeKey(d.API)] = snapshotEntry{Revision: d.Revision, Value: d.Marshal()}
	}
	for _, ft := range s.Faults {
		f.Flags[FaultKey(ft.API)] = snapshotEntry{Revision: ft.Revision, Value: ft.Marshal(), Created: ft.Written}
	}
	f.Apps = make(map[string]snapshotEntry, len(s.Apps))
	for id, a := range s.Apps {
		f.Apps[id] = snapshotEntry{Revision: a.Revision, Value: a.Marshal()}
	}
	if len(s.Certs) > 0 {
		f.Certs = make(map[string]snapshotEntry, len(s.Certs))
		for name, c := range s.Certs {
			f.Certs[name] = snapshotEntry{Revision: c.Revision, Value: c.Marshal()}
		}
	}
	if len(s.JSONSchemas) > 0 {
		f.JSONSchemas = make(map[string]snapshotEntry, len(s.JSONSchemas))
		for name, js := range s.JSONSchemas {
			f.JSONSchemas[name] = snapshotEntry{Revision: js.Revision, Value: js.Schema}
		}
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(w.o.SnapshotFile)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// CreateTemp makes the file 0600, which it must stay: apps' signing
	// secrets are in it.
	tmp, err := os.CreateTemp(dir, ".registry-*.tmp")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // gone after the rename; left only on failure
	if _, err := tmp.Write(b); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), w.o.SnapshotFile)
}
