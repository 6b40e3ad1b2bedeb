package registry

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Opening buckets. A Client starts opening (creating if missing) every
// bucket at once, in parallel, but a command waits only for the buckets it
// uses: a bucket that cannot be opened (its stream offline, its subjects
// denied to the user) fails the calls that use it, never a write to
// another bucket.
const (
	// eagerWait is how long NewClient waits for the buckets it does not
	// know the caller needs; the opens go on in the background.
	eagerWait = 2 * time.Second
	// backgroundOpen bounds one open started by NewClient, which outlives
	// NewClient's context (a node cancels it once NewClient returns).
	backgroundOpen = 10 * time.Second
)

// opening is one open (or create) in flight or done.
type opening struct {
	done chan struct{}
	err  error
}

// lazyKV is a KV bucket opened on first use: it is a jetstream.KeyValue
// whose every call first waits for the bucket to be open (or opens it
// again, within the call's context, when the last attempt failed).
type lazyKV struct {
	name string
	open func(ctx context.Context) (jetstream.KeyValue, error)

	mu  sync.Mutex
	kv  jetstream.KeyValue
	cur *opening // the attempt in flight or the last one
}

func newLazyKV(name string, js jetstream.JetStream, o BucketOptions, open func(context.Context, jetstream.JetStream, BucketOptions) (jetstream.KeyValue, error)) *lazyKV {
	return &lazyKV{name: name, open: func(ctx context.Context) (jetstream.KeyValue, error) { return open(ctx, js, o) }}
}

// attempt returns the open in flight, or the successful one, or starts a
// new one (fresh) when there is none or the last one failed.
func (b *lazyKV) attempt(ctx context.Context) (op *opening, fresh bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cur != nil && (!closed(b.cur.done) || b.cur.err == nil) {
		return b.cur, false
	}
	op = &opening{done: make(chan struct{})}
	b.cur = op
	go func() {
		kv, err := b.open(ctx)
		b.mu.Lock()
		b.kv, op.err = kv, err
		b.mu.Unlock()
		close(op.done)
	}()
	return op, true
}

func closed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// get returns the open bucket: it waits for an open in flight, and opens
// the bucket again, within ctx, when an earlier attempt failed.
func (b *lazyKV) get(ctx context.Context) (jetstream.KeyValue, error) {
	b.mu.Lock()
	kv := b.kv
	b.mu.Unlock()
	if kv != nil {
		return kv, nil
	}
	for {
		op, fresh := b.attempt(ctx)
		select {
		case <-op.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if op.err == nil {
			b.mu.Lock()
			defer b.mu.Unlock()
			return b.kv, nil
		}
		if fresh {
			return nil, op.err
		}
		// Someone else's attempt failed (NewClient's, or a call whose
		// context ended): one of our own, within ctx.
	}
}

// streamOpen is a stream (or set of streams) opened once in the background,
// whose error the client reports on demand (PushStreamsErr).
type streamOpen struct {
	done chan struct{}
	err  error
}

func startStreamOpen(ctx context.Context, open func(context.Context) error) *streamOpen {
	s := &streamOpen{done: make(chan struct{})}
	go func() {
		s.err = open(ctx)
		close(s.done)
	}()
	return s
}

// wait returns the open's error, waiting for it to end.
func (s *streamOpen) wait() error {
	<-s.done
	return s.err
}

// BucketOpenError is a call that failed because its bucket could not be
// opened: nothing was read or written.
type BucketOpenError struct {
	Bucket string
	Err    error
}

func (e *BucketOpenError) Error() string {
	msg := e.Err.Error()
	if !strings.Contains(msg, "bucket "+e.Bucket) {
		msg = "opening bucket " + e.Bucket + ": " + msg
	}
	if errors.Is(e.Err, context.DeadlineExceeded) {
		msg += " (JetStream did not answer in time: quorum lost, or the bucket's stream offline?)"
	}
	return msg
}

func (e *BucketOpenError) Unwrap() error { return e.Err }

// bucketErr is the error of a lazyKV call whose bucket could not be
// opened.
func bucketErr(name string, err error) error {
	return &BucketOpenError{Bucket: name, Err: err}
}

func (b *lazyKV) Bucket() string { return b.name }

func (b *lazyKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	kv, err := b.get(ctx)
	if err != nil {
		return nil, bucketErr(b.name, err)
	}
	return kv.Get(ctx, key)
}

func (b *lazyKV) GetRevision(ctx context.Context, key string, revision uint64) (jetstream.KeyValueEntry, error) {
	kv, err := b.get(ctx)
	if err != nil {
		return nil, bucketErr(b.name, err)
	}
	return kv.GetRevision(ctx, key, revision)
}

func (b *lazyKV) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	kv, err := b.get(ctx)
	if err != nil {
		return 0, bucketErr(b.name, err)
	}
	return kv.Put(ctx, key, value)
}

func (b *lazyKV) PutString(ctx context.Context, key string, value string) (uint64, error) {
	kv, err := b.get(ctx)
	if err != nil {
		return 0, bucketErr(b.name, err)
	}
	return kv.PutString(ctx, key, value)
}

func (b *lazyKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	kv, err := b.get(ctx)
	if err != nil {
		return 0, bucketErr(b.name, err)
	}
	return kv.Create(ctx, key, value, opts...)
}

func (b *lazyKV) Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error) {
	kv, err := b.get(ctx)
	if err != nil {
		return 0, bucketErr(b.name, err)
	}
	return kv.Update(ctx, key, value, revision)
}

func (b *lazyKV) Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	kv, err := b.get(ctx)
	if err != nil {
		return bucketErr(b.name, err)
	}
	return kv.Delete(ctx, key, opts...)
}

func (b *lazyKV) Purge(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	kv, err := b.get(ctx)
	if err != nil {
		return bucketErr(b.name, err)
	}
	return kv.Purge(ctx, key, opts...)
}

func (b *lazyKV) Watch(ctx context.Context, keys string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	kv, err := b.get(ctx)
	if err != nil {
		return nil, bucketErr(b.name, err)
	}
	return kv.Watch(ctx, keys, opts...)
}

func (b *lazyKV) WatchAll(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	kv, err := b.get(ctx)
	if err != nil {
		return nil, bucketErr(b.name, err)
	}
	return kv.WatchAll(ctx, opts...)
}

func (b *lazyKV) WatchFiltered(ctx context.Context, keys []string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	kv, err := b.get(ctx)
	if err != nil {
		return nil, bucketErr(b.name, err)
	}
	return kv.WatchFiltered(ctx, keys, opts...)
}

func (b *lazyKV) Keys(ctx context.Context, opts ...jetstream.WatchOpt) ([]string, error) {
	kv, err := b.get(ctx)
	if err != nil {
		return nil, bucketErr(b.name, err)
	}
	return kv.Keys(ctx, opts...) //nolint:staticcheck // part of the interface this type implements
}

func (b *lazyKV) ListKeys(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyLister, error) {
	kv, err := b.get(ctx)
	if err != nil {
		return nil, bucketErr(b.name, err)
	}
	return kv.ListKeys(ctx, opts...)
}

func (b *lazyKV) ListKeysFiltered(ctx context.Context, filters ...string) (jetstream.KeyLister, error) {
	kv, err := b.get(ctx)
	if err != nil {
		return nil, bucketErr(b.name, err)
	}
	return kv.ListKeysFiltered(ctx, filters...)
}

func (b *lazyKV) History(ctx context.Context, key string, opts ...jetstream.WatchOpt) ([]jetstream.KeyValueEntry, error) {
	kv, err := b.get(ctx)
	if err != nil {
		return nil, bucketErr(b.name, err)
	}
	return kv.History(ctx, key, opts...)
}

func (b *lazyKV) PurgeDeletes(ctx context.Context, opts ...jetstream.KVPurgeOpt) error {
	kv, err := b.get(ctx)
	if err != nil {
		return bucketErr(b.name, err)
	}
	return kv.PurgeDeletes(ctx, opts...)
}

func (b *lazyKV) Status(ctx context.Context) (jetstream.KeyValueStatus, error) {
	kv, err := b.get(ctx)
	if err != nil {
		return nil, bucketErr(b.name, err)
	}
	return kv.Status(ctx)
}

var _ jetstream.KeyValue = (*lazyKV)(nil)
