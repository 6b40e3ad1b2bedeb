package registry

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
)

// Bucket names.
const (
	BucketAPIs = bus.BucketAPIs
)

// HistoryDepth is how many revisions of each key the buckets keep (the KV
// maximum), so that `jetway api rollback` can go back that far.
const HistoryDepth = 64

// BucketOptions set how missing buckets are created.
type BucketOptions struct {
	// Replicas for the bucket's stream: 1 for a single server, 3 for a
	// production cluster. 0 means 1.
	Replicas int
}

// OpenAPIs opens the jetway_apis bucket, creating it when it is missing.
// A bucket that exists is used as it is (its replica count is not changed).
func OpenAPIs(ctx context.Context, js jetstream.JetStream, o BucketOptions) (jetstream.KeyValue, error) {
	return openBucket(ctx, js, jetstream.KeyValueConfig{
		Bucket:      BucketAPIs,
		Description: "Jetway API definitions (key = API name, value = JSON per schemas/api.schema.json)",
		History:     HistoryDepth,
		Replicas:    max(o.Replicas, 1),
	})
}

func openBucket(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if err == nil {
		return kv, nil
	}
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("opening bucket %s: %w", cfg.Bucket, err)
	}
	kv, err = js.CreateKeyValue(ctx, cfg)
	if errors.Is(err, jetstream.ErrBucketExists) {
		kv, err = js.KeyValue(ctx, cfg.Bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("creating bucket %s: %w", cfg.Bucket, err)
	}
	return kv, nil
}

// Client reads and writes API entries; the CLI and tests use it. Writes are
// validated first: an invalid entry is never written.
//
// Each bucket is opened on first use (lazyKV): a call waits only for the
// buckets it reads or writes, so one bucket that cannot be opened fails
// the calls that use it, not every write.
type Client struct {
	js      jetstream.JetStream
	kv      jetstream.KeyValue
	flags   jetstream.KeyValue
	alerts  jetstream.KeyValue
	apps    jetstream.KeyValue
	certs   jetstream.KeyValue
	schemas jetstream.KeyValue

	jsonSchemas jetstream.KeyValue

	tokens jetstream.KeyValue // the admin REST API's tokens
	topics jetstream.KeyValue // push topics

	secrets jetstream.KeyValue // backend credentials by pool

	push     *streamOpen // the push streams (PushStreamsErr)
	jobs     *streamOpen // the async job streams (JobStreamsErr)
	replicas int         // the BucketOptions' replicas, for streams opened later

	actor    string      // who the audit trail says writes (As)
	auditErr func(error) // WithAuditErrors
	settled  bool        // its audit records are of writes settled by read-back (OutcomeUnknownError.Settle)
}

// NewClient returns a client of the registry over nc. It starts opening
// every bucket and stream of the registry at once, creating those that are
// missing (with o's replicas), so that one admin command creates every
// bucket edges and workers may not create themselves; it waits for them
// within ctx, but no longer than a couple of seconds: a bucket still
// opening, or that failed to open, is opened again by the first call that
// uses it. So a write needs only its own bucket: `api put` works while the
// alert rules' bucket cannot be opened. The opens started here go on after
// ctx ends (up to 10 s each).
func NewClient(ctx context.Context, nc *nats.Conn, o BucketOptions) (*Client, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("opening jetstream: %w", err)
	}
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), backgroundOpen)
	lazy := func(name string, open func(context.Context, jetstream.JetStream, BucketOptions) (jetstream.KeyValue, error)) *lazyKV {
		return newLazyKV(name, js, o, open)
	}
	c := &Client{js: js, replicas: o.Replicas, actor: DefaultActor(),
		kv: lazy(BucketAPIs, OpenAPIs), flags: lazy(BucketFlags, OpenFlags), alerts: lazy(BucketAlerts, OpenAlerts),
		apps: lazy(BucketApps, OpenApps), certs: lazy(BucketCerts, OpenCerts), schemas: lazy(BucketSchemas, OpenSchemas),
		jsonSchemas: lazy(BucketJSONSchemas, OpenJSONSchemas), tokens: lazy(bus.BucketAdminTokens, OpenAdminTokens),
		topics: lazy(BucketTopics, OpenTopics), secrets: lazy(bus.BucketSecrets, OpenSecrets)}
	var waits []<-chan struct{}
	for _, b := range []jetstream.KeyValue{c.kv, c.flags, c.alerts, c.apps, c.certs, c.schemas, c.jsonSchemas, c.tokens, c.topics, c.secrets} {
		op, _ := b.(*lazyKV).attempt(bctx)
		waits = append(waits, op.done)
	}
	// Not used by the client, but made here so that one admin command
	// creates every bucket edges and workers may not create themselves.
	for _, open := range []func(context.Context) error{
		func(ctx context.Context) error { _, err := OpenACME(ctx, js, o); return err },
		func(ctx context.Context) error { _, err := OpenNonces(ctx, js, o); return err },
		func(ctx context.Context) error { _, err := OpenCache(ctx, js, o); return err },
		func(ctx context.Context) error { _, err := OpenAudit(ctx, js, o); return err },
		func(ctx context.Context) error { _, err := OpenChannels(ctx, js, o); return err },
	} {
		waits = append(waits, startStreamOpen(bctx, open).done)
	}
	// Push is one capability among others: without room for its streams
	// the registry still serves APIs, and PutTopic tries again. Its
	// streams take what room the bounded buckets leave (halving their
	// caps to fit), so they are made after them.
	registryOpened := slices.Clone(waits)
	c.push = startStreamOpen(bctx, func(ctx context.Context) error {
		for _, w := range registryOpened {
			<-w
		}
		return OpenPushStreams(ctx, js, o)
	})
	// So is async: without its streams an API with an async block still
	// answers its synchronous calls, and its jobs are refused.
	c.jobs = startStreamOpen(bctx, func(ctx context.Context) error {
		<-c.push.done
		return OpenJobStreams(ctx, js, o)
	})
	waits = append(waits, c.push.done, c.jobs.done)
	go func() {
		for _, w := range waits {
			<-w
		}
		cancel()
	}()
	timer := time.NewTimer(eagerWait)
	defer timer.Stop()
	for _, w := range waits {
		select {
		case <-w:
		case <-ctx.Done():
			return c, nil
		case <-timer.C:
			return c, nil
		}
	}
	return c, nil
}

// PushStreamsErr is why NewClient could not open the push streams (nil
// when it did): topics cannot be written until they open. It waits for
// the open NewClient started.
func (c *Client) PushStreamsErr() error { return c.push.wait() }

// JobStreamsErr is why NewClient could not open the async job streams
// (nil when it did): async jobs are refused until they open. It waits for
// the open NewClient started.
func (c *Client) JobStreamsErr() error { return c.jobs.wait() }

// ErrNotFound is returned for an API or revision that does not exist.
var ErrNotFound = errors.New("not found")

// Put validates doc (JSON or YAML) and stores it under its name. It returns
// the parsed entry with its new revision, a *ValidationError, or a
// *RouteConflictError when an API would lose its route by it (publish).
// With IfRevision it writes only if the API is at that revision (0: only if
// it does not exist), and fails with a *ConflictError otherwise.
func (c *Client) Put(ctx context.Context, doc []byte, opts ...WriteOption) (*API, error) {
	return c.put(ctx, doc, false, opts)
}

// put is Put of an API or of a draft (PutDraft).
func (c *Client) put(ctx context.Context, doc []byte, draft bool, opts []WriteOption) (*API, error) {
	a, err := parseAPIDoc("", draft, doc)
	if err != nil {
		return nil, err
	}
	js, err := ToJSON(doc)
	if err != nil {
		return nil, err
	}
	key := a.StoreKey()
	if a, err = c.publish(ctx, a, js, opts); err != nil {
		return nil, c.notedLater(err, "api", "put", key)
	}
	return a, c.noted(ctx, "api", "put", key, a.Revision, nil)
}

// Entry is a stored value with its revision, as the CLI shows it.
type Entry struct {
	Name     string
	Revision uint64
	Op       string // PUT, DEL or PURGE
	Value    []byte
	Created  string
	// Err is set, and the rest but Name empty, for a key that cannot be
	// read as one: not a valid KV key (a raw write on a wildcard subject
	// such as $KV.jetway_apis.*). Nodes skip such keys; lists show them.
	Err error
}

func toEntry(e jetstream.KeyValueEntry) Entry {
	op := "PUT"
	switch e.Operation() {
	case jetstream.KeyValueDelete:
		op = "DEL"
	case jetstream.KeyValuePurge:
		op = "PURGE"
	}
	return Entry{Name: e.Key(), Revision: e.Revision(), Op: op, Value: e.Value(), Created: e.Created().UTC().Format("2006-01-02T15:04:05.000Z")}
}

// Get returns the current value of an API's entry.
func (c *Client) Get(ctx context.Context, name string) (Entry, error) {
	e, err := c.kv.Get(ctx, name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Entry{}, fmt.Errorf("api %s: %w", name, ErrNotFound)
	}
	if err != nil {
		return Entry{}, fmt.Errorf("reading %s: %w", name, err)
	}
	return toEntry(e), nil
}

// List returns the current entries, sorted by name.
func (c *Client) List(ctx context.Context) ([]Entry, error) {
	lister, err := c.kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing apis: %w", err)
	}
	var names []string
	for k := range lister.Keys() {
		names = append(names, k)
	}
	sort.Strings(names)
	out := make([]Entry, 0, len(names))
	for _, n := range names {
		e, err := c.Get(ctx, n)
		if errors.Is(err, ErrNotFound) {
			continue // deleted meanwhile
		}
		if errors.Is(err, jetstream.ErrInvalidKey) {
			out = append(out, Entry{Name: n, Err: errBadKey(n)})
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// errBadKey says why a listed key is skipped.
func errBadKey(key string) error {
	return fmt.Errorf("%q is not a valid key (written raw, on a wildcard or malformed subject); every node skips it", key)
}

// Delete removes an API (its history stays for rollback). With
// IfRevision(n), n > 0, it deletes only if the API is at revision n, and
// fails with a *ConflictError otherwise.
func (c *Client) Delete(ctx context.Context, name string, opts ...WriteOption) error {
	o := collect(opts)
	if o.ifRevision != nil && *o.ifRevision == 0 {
		return fmt.Errorf("deleting %s: revision 0 (\"must not exist\") cannot be deleted; give the revision to delete", name)
	}
	if _, err := c.Get(ctx, name); err != nil {
		return err
	}
	var dopts []jetstream.KVDeleteOpt
	if o.ifRevision != nil {
		dopts = append(dopts, jetstream.LastRevision(*o.ifRevision))
	}
	if err := c.kv.Delete(ctx, name, dopts...); err != nil {
		if o.ifRevision != nil && isConflict(err) {
			return conflict(ctx, c.kv, "api", name, *o.ifRevision)
		}
		return c.notedLater(writeFailed(c.kv, "delete", "api", name, nil, 0, err), "api", "delete", name)
	}
	return c.noted(ctx, "api", "delete", name, 0, nil)
}

// History returns every kept revision of an API, oldest first.
func (c *Client) History(ctx context.Context, name string) ([]Entry, error) {
	hs, err := c.kv.History(ctx, name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("api %s: %w", name, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("reading history of %s: %w", name, err)
	}
	out := make([]Entry, len(hs))
	for i, h := range hs {
		out[i] = toEntry(h)
	}
	return out, nil
}

// Rollback writes the value an API had at revision as its newest value.
// The old value is validated again; rolling back to a deletion, to an
// entry that no longer validates, or to a route another API holds now is
// refused. With IfRevision the write is conditional, as for Put.
func (c *Client) Rollback(ctx context.Context, name string, revision uint64, opts ...WriteOption) (*API, error) {
	e, err := c.GetRevision(ctx, name, revision)
	if err != nil {
		return nil, err
	}
	if e.Op != "PUT" {
		return nil, fmt.Errorf("revision %d of %s is a deletion, not a value", revision, name)
	}
	a, err := ParseAPI(name, e.Value)
	if err != nil {
		return nil, fmt.Errorf("revision %d no longer validates: %w", revision, err)
	}
	if a, err = c.publish(ctx, a, e.Value, opts); err != nil {
		return nil, c.notedLater(err, "api", "rollback", name)
	}
	return a, c.noted(ctx, "api", "rollback", a.Name, a.Revision, nil)
}

// SetDegrade writes an API's degrade switch (on or off). The switch is
// validated first; the API need not exist (a switch can be set ahead).
// With IfRevision the write is conditional, as for Put.
func (c *Client) SetDegrade(ctx context.Context, api string, d *Degrade, opts ...WriteOption) (*Degrade, error) {
	key := DegradeKey(api)
	doc := d.Marshal()
	parsed, err := ParseDegrade(key, doc)
	if err != nil {
		return nil, err
	}
	rev, err := c.putFlag(ctx, key, doc, opts...)
	if err != nil {
		return nil, err
	}
	parsed.Revision = rev
	return parsed, nil
}

// ClearDegrade deletes an API's degrade switch, restoring the API. With
// IfRevision(n) it deletes only the switch at revision n.
func (c *Client) ClearDegrade(ctx context.Context, api string, opts ...WriteOption) error {
	return c.deleteFlag(ctx, DegradeKey(api), opts...)
}

// GetDegrade returns an API's degrade switch, with its revision.
func (c *Client) GetDegrade(ctx context.Context, api string) (*Degrade, error) {
	d, rev, err := getFlag(ctx, c.flags, DegradeKey(api), ParseDegrade)
	if err != nil {
		return nil, err
	}
	d.Revision = rev
	return d, nil
}

// getFlag reads and parses one switch, with its revision.
func getFlag[T any](ctx context.Context, kv jetstream.KeyValue, key string, parse func(key string, doc []byte) (T, error)) (T, uint64, error) {
	var zero T
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return zero, 0, fmt.Errorf("switch %s: %w", key, ErrNotFound)
	}
	if err != nil {
		return zero, 0, fmt.Errorf("reading %s: %w", key, err)
	}
	v, err := parse(key, e.Value())
	var ve *ValidationError
	if errors.As(err, &ve) {
		ve.Revision = e.Revision()
	}
	return v, e.Revision(), err
}

func (c *Client) putFlag(ctx context.Context, key string, doc []byte, opts ...WriteOption) (uint64, error) {
	kind, api := flagKind(key)
	rev, err := write(ctx, c.flags, kind+" switch", key, doc, opts)
	if err != nil {
		return 0, c.notedLater(err, kind, "put", api)
	}
	return rev, c.noted(ctx, kind, "put", api, rev, nil)
}

func (c *Client) deleteFlag(ctx context.Context, key string, opts ...WriteOption) error {
	kind, api := flagKind(key)
	if err := remove(ctx, c.flags, kind+" switch", key, opts); err != nil {
		return c.notedLater(err, kind, "delete", api)
	}
	return c.noted(ctx, kind, "delete", api, 0, nil)
}

// flagKind is the audit kind of a switch's key, and its API.
func flagKind(key string) (kind, api string) {
	if api, ok := strings.CutPrefix(key, FaultPrefix); ok {
		return "fault", api
	}
	return "degrade", strings.TrimPrefix(key, DegradePrefix)
}

// ListDegrade returns every degrade switch in the bucket (on or off, valid
// or not: an invalid one is returned with its error), sorted by key.
func (c *Client) ListDegrade(ctx context.Context) ([]Listed[*Degrade], error) {
	all, err := listParsed(ctx, c.flags, ParseDegrade)
	return slices.DeleteFunc(all, func(l Listed[*Degrade]) bool { return strings.HasPrefix(l.Key, FaultPrefix) }), err
}

// SetFault writes an API's fault switch, validated first (expiring at most
// MaxFaultFor from now); the API need not exist. With IfRevision the write
// is conditional, as for Put.
func (c *Client) SetFault(ctx context.Context, api string, f *Fault, opts ...WriteOption) (*Fault, error) {
	key := FaultKey(api)
	doc := f.Marshal()
	parsed, err := ParseFault(key, doc, time.Now())
	if err != nil {
		return nil, err
	}
	rev, err := c.putFlag(ctx, key, doc, opts...)
	if err != nil {
		return nil, err
	}
	parsed.Revision = rev
	return parsed, nil
}

// ClearFault deletes an API's fault switch: the drill ends on every edge.
// With IfRevision(n) it deletes only the switch at revision n.
func (c *Client) ClearFault(ctx context.Context, api string, opts ...WriteOption) error {
	return c.deleteFlag(ctx, FaultKey(api), opts...)
}

// GetFault returns an API's fault switch, with its revision.
func (c *Client) GetFault(ctx context.Context, api string) (*Fault, error) {
	f, rev, err := getFlag(ctx, c.flags, FaultKey(api), func(key string, doc []byte) (*Fault, error) { return ParseFault(key, doc, time.Time{}) })
	if err != nil {
		return nil, err
	}
	f.Revision = rev
	return f, nil
}

// ListFaults returns every fault switch in the bucket (expired ones too;
// an invalid one with its error), sorted by key.
func (c *Client) ListFaults(ctx context.Context) ([]Listed[*Fault], error) {
	all, err := listParsed(ctx, c.flags, func(key string, doc []byte) (*Fault, error) { return ParseFault(key, doc, time.Time{}) })
	return slices.DeleteFunc(all, func(l Listed[*Fault]) bool { return !strings.HasPrefix(l.Key, FaultPrefix) }), err
}

// Listed is one stored entry as the List calls return it: its key and
// revision, and its parsed value or why it does not parse.
type Listed[T any] struct {
	Key      string
	Revision uint64
	Value    T // the zero value when Err is set
	Err      error
}

// listParsed reads every key of a bucket, sorted, and parses each value.
func listParsed[T any](ctx context.Context, kv jetstream.KeyValue, parse func(key string, doc []byte) (T, error)) ([]Listed[T], error) {
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", kv.Bucket(), err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []Listed[T]
	for _, k := range keys {
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // deleted meanwhile
		}
		if errors.Is(err, jetstream.ErrInvalidKey) {
			var zero T
			out = append(out, Listed[T]{Key: k, Value: zero, Err: errBadKey(k)})
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", k, err)
		}
		v, perr := parse(k, e.Value())
		out = append(out, Listed[T]{Key: k, Revision: e.Revision(), Value: v, Err: perr})
	}
	return out, nil
}

// PutAlert validates an alert rule (JSON or YAML) and stores it under its
// name; with IfRevision only at that revision (0: create only).
func (c *Client) PutAlert(ctx context.Context, doc []byte, opts ...WriteOption) (*AlertRule, error) {
	r, err := ParseAlert("", doc)
	if err != nil {
		return nil, err
	}
	js, _ := ToJSON(doc)
	rev, err := write(ctx, c.alerts, "alert", r.Name, js, opts)
	if err != nil {
		return nil, c.notedLater(err, "alert", "put", r.Name)
	}
	r.Revision = rev
	return r, c.noted(ctx, "alert", "put", r.Name, rev, nil)
}

// DeleteAlert removes an alert rule; with IfRevision(n) only the rule at
// revision n.
func (c *Client) DeleteAlert(ctx context.Context, name string, opts ...WriteOption) error {
	if err := remove(ctx, c.alerts, "alert", name, opts); err != nil {
		return c.notedLater(err, "alert", "delete", name)
	}
	return c.noted(ctx, "alert", "delete", name, 0, nil)
}

// ListAlerts returns the stored alert rules (invalid ones with their
// error), sorted by name.
func (c *Client) ListAlerts(ctx context.Context) ([]Listed[*AlertRule], error) {
	return listParsed(ctx, c.alerts, ParseAlert)
}

// PutApp validates and stores an app: unconditionally, or with IfRevision
// only at that revision (IfRevision(0): create only). To change an app, use
// UpdateApp, never GetApp then PutApp: a write in between would be lost.
func (c *Client) PutApp(ctx context.Context, a *App, opts ...WriteOption) (*App, error) {
	doc := a.Marshal()
	parsed, err := ParseApp(a.ID, doc)
	if err != nil {
		return nil, err
	}
	rev, err := write(ctx, c.apps, "app", a.ID, doc, opts)
	if err != nil {
		return nil, c.notedLater(err, "app", "put", a.ID)
	}
	parsed.Revision = rev
	return parsed, c.noted(ctx, "app", "put", a.ID, rev, nil)
}

// UpdateApp applies change to the stored app and writes the result only if
// no one wrote the app in between; if someone did, change is applied again
// to a fresh read (see update). So concurrent changes all land — a grant
// racing a key rotation keeps both — and the returned app, with its
// revision, is exactly what was stored by the last run of change.
func (c *Client) UpdateApp(ctx context.Context, id string, change func(a *App) error) (*App, error) {
	var out *App
	rev, err := update(ctx, c.apps, "app", id, func(doc []byte, rev uint64) ([]byte, error) {
		a, err := ParseApp(id, doc)
		if err != nil {
			return nil, fmt.Errorf("app %s at revision %d: %w", id, rev, err)
		}
		if err := change(a); err != nil {
			return nil, err
		}
		next := a.Marshal()
		if out, err = ParseApp(id, next); err != nil {
			return nil, err
		}
		return next, nil
	})
	if err != nil {
		return nil, c.notedLater(err, "app", "put", id)
	}
	out.Revision = rev
	return out, c.noted(ctx, "app", "put", id, rev, nil)
}

// GetApp reads an app.
func (c *Client) GetApp(ctx context.Context, id string) (*App, error) {
	e, err := c.apps.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("app %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("reading app %s: %w", id, err)
	}
	a, err := ParseApp(id, e.Value())
	if err != nil {
		return nil, err
	}
	a.Revision = e.Revision()
	return a, nil
}

// ListApps returns every stored app, sorted by id.
func (c *Client) ListApps(ctx context.Context) ([]Listed[*App], error) {
	return listParsed(ctx, c.apps, ParseApp)
}
