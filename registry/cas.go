package registry

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrConflict matches every *ConflictError (errors.Is).
var ErrConflict = errors.New("conflict")

// ConflictError is a write refused because the key was not at the revision
// the writer expected: someone else changed it in between. Nothing was
// written.
type ConflictError struct {
	Kind string // "api", "app", ...
	Key  string
	// Want is the revision the write expected; 0 means "must not exist".
	Want uint64
	// Current is the revision the key is at now, 0 if it does not exist
	// (never written, or deleted).
	Current uint64
}

func (e *ConflictError) Error() string {
	name := e.Kind + " " + e.Key
	switch {
	case e.Want == 0:
		return fmt.Sprintf("conflict: %s exists already at revision %d (expected none); get it and retry", name, e.Current)
	case e.Current == 0:
		return fmt.Sprintf("conflict: %s does not exist now, not at revision %d (never published, or deleted since); get it again and retry", name, e.Want)
	}
	return fmt.Sprintf("conflict: %s is at revision %d, not %d (changed by someone else); get it again and retry", name, e.Current, e.Want)
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// WriteOption sets a precondition on a write.
type WriteOption func(*writeOpts)

type writeOpts struct {
	ifRevision *uint64
}

// IfRevision makes a write happen only if the key is at revision rev now;
// rev 0 means the key must not exist (never written, or deleted): create
// only. Otherwise the write fails with a *ConflictError.
func IfRevision(rev uint64) WriteOption {
	return func(o *writeOpts) { o.ifRevision = &rev }
}

func collect(opts []WriteOption) writeOpts {
	var o writeOpts
	for _, f := range opts {
		f(&o)
	}
	return o
}

// write stores value under key: unconditionally, or, with IfRevision, only
// at that revision (a KV compare-and-set). kind names the key in errors.
func write(ctx context.Context, kv jetstream.KeyValue, kind, key string, value []byte, opts []WriteOption) (uint64, error) {
	o := collect(opts)
	var rev, before uint64
	var err error
	switch {
	case o.ifRevision == nil:
		// The revision before, so that a write whose outcome is unknown
		// can be told apart from an earlier write of the same value
		// (with IfRevision the caller knows it: no read).
		before = revisionBefore(ctx, kv, key)
		if cerr := ctx.Err(); cerr != nil {
			// The time ran out before the write was sent.
			return 0, writeFailed(kv, "put", kind, key, value, before, &notSentError{cerr})
		}
		rev, err = kv.Put(ctx, key, value)
	case *o.ifRevision == 0:
		rev, err = kv.Create(ctx, key, value)
	default:
		before = *o.ifRevision
		rev, err = kv.Update(ctx, key, value, before)
	}
	if err == nil {
		return rev, nil
	}
	if o.ifRevision != nil && isConflict(err) {
		return 0, conflict(ctx, kv, kind, key, *o.ifRevision)
	}
	return 0, writeFailed(kv, "put", kind, key, value, before, err)
}

// Bounds of the read of a key's revision before an unconditional write: a
// share of the time left, so that a registry that does not answer (quorum
// lost) leaves the write itself its time.
const (
	beforeReadMax   = time.Second
	beforeReadShare = 3 // at most 1/beforeReadShare of the time left
)

// revisionBefore reads key's revision before a write, within a short
// timeout of its own: 0 when the key does not exist, revUnknown when it
// could not be read (then no read-back can show the write landed).
func revisionBefore(ctx context.Context, kv jetstream.KeyValue, key string) uint64 {
	d := beforeReadMax
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl)/beforeReadShare)
	}
	if d <= 0 {
		return revUnknown
	}
	gctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	e, err := kv.Get(gctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return 0
	case err != nil:
		return revUnknown
	}
	return e.Revision()
}

// isConflict reports whether a KV write failed on its revision check.
// ErrKeyExists (Create) and ErrKeyRevisionMismatch (Update, Delete with
// LastRevision) cover both the R1 and the replicated stream codes.
func isConflict(err error) bool {
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch)
}

// conflict builds the *ConflictError for a write that expected want, with
// the key's revision now (best effort: 0 when it cannot be read).
func conflict(ctx context.Context, kv jetstream.KeyValue, kind, key string, want uint64) error {
	ce := &ConflictError{Kind: kind, Key: key, Want: want}
	if e, err := kv.Get(ctx, key); err == nil {
		ce.Current = e.Revision()
	}
	return ce
}

// Bounds of update's retries. A conflict means another writer got in
// between our read and our write; with a fresh read the next attempt
// almost always wins, so a few attempts with a short random pause (which
// spreads writers that collided) are plenty, and the caller's context
// deadline bounds them all.
const (
	updateAttempts = 20
	updateBackoff  = 2 * time.Millisecond  // first pause, doubled per attempt
	updateMaxPause = 50 * time.Millisecond // cap of one pause
)

// update is the registry's one read-modify-write: it reads key, lets change
// make the new value from the current one (doc and its revision), and
// writes the result only if the key is still at the revision read (KV
// compare-and-set). On a conflict it reads again and calls change again on
// the fresh value, up to updateAttempts times, within ctx.
//
// change must derive the new value from what it is given alone: it may run
// several times, and only the value of its last run is stored. A missing
// key is ErrNotFound; an error from change is returned as it is, and
// nothing is written.
func update(ctx context.Context, kv jetstream.KeyValue, kind, key string, change func(doc []byte, rev uint64) ([]byte, error)) (uint64, error) {
	pause := updateBackoff
	var last error
	for attempt := 0; attempt < updateAttempts; attempt++ {
		if attempt > 0 {
			// Full jitter: a random pause in [pause/2, pause].
			d := pause/2 + rand.N(pause/2+1)
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return 0, fmt.Errorf("updating %s %s: %w (after %v)", kind, key, ctx.Err(), last)
			case <-t.C:
			}
			pause = min(2*pause, updateMaxPause)
		}
		e, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return 0, fmt.Errorf("%s %s: %w", kind, key, ErrNotFound)
		}
		if err != nil {
			return 0, fmt.Errorf("reading %s %s: %w", kind, key, err)
		}
		doc, err := change(e.Value(), e.Revision())
		if err != nil {
			return 0, err
		}
		rev, err := kv.Update(ctx, key, doc, e.Revision())
		if err == nil {
			return rev, nil
		}
		if !isConflict(err) {
			return 0, writeFailed(kv, "put", kind, key, doc, e.Revision(), err)
		}
		last = conflict(ctx, kv, kind, key, e.Revision())
	}
	return 0, fmt.Errorf("%w (gave up after %d attempts: the key changes faster than it can be updated)", last, updateAttempts)
}

// remove deletes key (its history stays); with IfRevision(n) only while
// it is at revision n, failing with a *ConflictError otherwise.
func remove(ctx context.Context, kv jetstream.KeyValue, kind, key string, opts []WriteOption) error {
	var dopts []jetstream.KVDeleteOpt
	o := collect(opts)
	if o.ifRevision != nil {
		dopts = append(dopts, jetstream.LastRevision(*o.ifRevision))
	}
	if err := kv.Delete(ctx, key, dopts...); err != nil {
		if o.ifRevision != nil && isConflict(err) {
			return conflict(ctx, kv, kind, key, *o.ifRevision)
		}
		before := uint64(0)
		if o.ifRevision != nil {
			before = *o.ifRevision
		}
		return writeFailed(kv, "delete", kind, key, nil, before, err)
	}
	return nil
}
