package registry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
)

// ErrOutcomeUnknown matches every *OutcomeUnknownError (errors.Is).
var ErrOutcomeUnknown = errors.New("write outcome unknown")

// OutcomeUnknownError is a write sent to JetStream that got no answer in
// time (the context's deadline, nats.ErrTimeout): it may have landed, may
// not have, and may still land later — with quorum lost, a stream leader
// can hold the proposal and commit it when its peers return. Retrying an
// unconditional write is safe; Recheck reads the key to see whether the
// value written is in force.
type OutcomeUnknownError struct {
	Op     string // "put" or "delete"
	Kind   string // "api", "degrade switch", "app", ...
	Bucket string // the KV bucket written
	Key    string // the key written
	// Check is the command that shows the key's state, e.g.
	// "jetway api get NAME".
	Check string
	Err   error // the cause

	value  []byte // what was written (put)
	before uint64 // the key's revision before the write (0: none; revUnknown: not known)

	// settle is what the writer does after a write that was answered —
	// its audit record, follow-up steps — run by Settle once Recheck has
	// shown the write in force (nil: nothing).
	settle func(ctx context.Context, js jetstream.JetStream, rev uint64) error
	// js is the writer's connection (Resolve).
	js jetstream.JetStream
	// landed and landedRev: Recheck showed the write in force, at
	// landedRev (0 for a delete).
	landed    bool
	landedRev uint64
}

// revUnknown is an OutcomeUnknownError's before when the key's revision
// before the write could not be read: no value read back can then be told
// apart from an earlier write of the same value.
const revUnknown = math.MaxUint64

func (e *OutcomeUnknownError) Error() string {
	check := ""
	if e.Check != "" {
		check = "; check with `" + e.Check + "`"
	}
	return fmt.Sprintf("outcome unknown — %s of %s %s got no answer (%v): it may or may not have landed, and may still land once JetStream has quorum%s", e.verb(), e.Kind, e.Key, e.Err, check)
}

func (e *OutcomeUnknownError) verb() string {
	if e.Op == "delete" {
		return "the delete"
	}
	return "the write"
}

// Is makes errors.Is(err, ErrOutcomeUnknown) true.
func (e *OutcomeUnknownError) Is(target error) bool { return target == ErrOutcomeUnknown }

// Unwrap returns the cause.
func (e *OutcomeUnknownError) Unwrap() error { return e.Err }

// Recheck reads the key in js and reports whether the write is in force:
// for a put, the key holds the value written at a revision after the one
// it had before; for a delete, the key is gone. landed false means only
// "not yet": the write may still land (a proposal held by a leader that
// lost quorum), so the outcome stays unknown. A put whose key's revision
// before could not be read is never reported landed: the value read back
// may be an older write's. err is set when the key could not be read.
// Once it reports landed, Settle may run.
func (e *OutcomeUnknownError) Recheck(ctx context.Context, js jetstream.JetStream) (landed bool, rev uint64, err error) {
	landed, rev, err = e.recheck(ctx, js)
	if landed {
		e.landed, e.landedRev = true, rev
	}
	return landed, rev, err
}

func (e *OutcomeUnknownError) recheck(ctx context.Context, js jetstream.JetStream) (landed bool, rev uint64, err error) {
	kv, err := js.KeyValue(ctx, e.Bucket)
	if err != nil {
		return false, 0, fmt.Errorf("opening bucket %s: %w", e.Bucket, err)
	}
	if e.before == revUnknown {
		return false, 0, nil // nothing known to tell this write from another
	}
	// The key's revisions since the write: it landed if the last is this
	// write's (the value, or a delete) and no other since is alike — a
	// retry of this very write, or someone else setting the same value,
	// leaves it unknown rather than claimed. (One identical write by
	// another while this one was lost still reads as this one: only a
	// write id on every entry would tell them apart.)
	if e.Op == "delete" && e.before == 0 {
		// A delete whose writer did not read the revision first: gone is
		// the best word there is (whoever deleted it).
		en, err := kv.Get(ctx, e.Key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return true, 0, nil
		}
		if err != nil {
			return false, 0, err
		}
		return false, en.Revision(), nil
	}
	hist, err := kv.History(ctx, e.Key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, 0, nil
	}
	if err != nil {
		return false, 0, err
	}
	ours := func(en jetstream.KeyValueEntry) bool {
		if e.Op == "delete" {
			return en.Operation() == jetstream.KeyValueDelete || en.Operation() == jetstream.KeyValuePurge
		}
		return en.Operation() == jetstream.KeyValuePut && bytes.Equal(en.Value(), e.value)
	}
	matches := 0
	for _, en := range hist {
		if en.Revision() > e.before && ours(en) {
			matches++
		}
	}
	last := hist[len(hist)-1]
	return matches == 1 && ours(last), last.Revision(), nil
}

// ErrNotSettled is Settle called before Recheck showed the write landed.
var ErrNotSettled = errors.New("the write is not shown in force (Recheck first)")

// Settle does, after a write whose outcome was unknown and that Recheck
// has since shown in force, what the writer would have done had the write
// been answered: its audit record (marked settled by read-back) and its
// follow-up steps (a promoted draft's removal, say), on js (the client the
// write went through may be closed by then). An error says what is
// missing — an audit record not stored, a follow-up not done, a secret
// never shown — while the write itself stands. Without a Recheck that
// showed the write landed it does nothing and returns ErrNotSettled.
func (e *OutcomeUnknownError) Settle(ctx context.Context, js jetstream.JetStream) error {
	if !e.landed {
		return fmt.Errorf("settling the %s of %s %s: %w", e.Op, e.Kind, e.Key, ErrNotSettled)
	}
	if e.settle == nil {
		return nil
	}
	return e.settle(ctx, js, e.landedRev)
}

// Resolve reads the key back on the writer's own connection, a read every
// pause until ctx ends, and once a read shows the write in force settles it
// (Settle) on that connection: for a writer whose connection outlives its
// answer, such as the admin API, which has already answered "outcome
// unknown". landed false: not shown in force before ctx ended (or the
// connection closed); err: what settling left undone.
func (e *OutcomeUnknownError) Resolve(ctx context.Context, pause time.Duration) (landed bool, err error) {
	if e.js == nil {
		return false, nil
	}
	for {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		landed, _, rerr := e.Recheck(rctx, e.js)
		cancel()
		if rerr == nil && landed {
			return true, e.Settle(ctx, e.js)
		}
		if errors.Is(rerr, nats.ErrConnectionClosed) {
			return false, nil
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return false, nil
		case <-t.C:
		}
	}
}

// afterLanded adds f to what the *OutcomeUnknownError in err (if any)
// settles with (after what it had): f runs, by Settle, on a copy of c over
// Settle's connection whose audit records say they were settled by
// read-back and whose audit failures are returned, never handed to
// WithAuditErrors's function; rev is the revision the read-back found (0
// for a delete). Only c.js is Settle's: f opens any bucket it writes from
// it. err is returned as it is.
func (c *Client) afterLanded(err error, f func(ctx context.Context, c *Client, rev uint64) error) error {
	var ue *OutcomeUnknownError
	if !errors.As(err, &ue) {
		return err
	}
	prev := ue.settle
	if ue.js == nil {
		ue.js = c.js
	}
	ue.settle = func(ctx context.Context, js jetstream.JetStream, rev uint64) error {
		var perr error
		if prev != nil {
			perr = prev(ctx, js, rev)
		}
		cc := *c
		cc.js, cc.auditErr, cc.settled = js, nil, true
		return errors.Join(perr, f(ctx, &cc, rev))
	}
	return err
}

// notedLater is afterLanded with the write's audit record: what noted
// would have recorded had the write been answered.
func (c *Client) notedLater(err error, kind, action, key string) error {
	return c.afterLanded(err, func(ctx context.Context, cc *Client, rev uint64) error {
		return cc.noted(ctx, kind, action, key, rev, nil)
	})
}

// noAnswer reports whether a write's error leaves its outcome unknown: the
// request was sent and no answer came (a deadline, a timeout, the caller
// giving up). A "no responders" answer (jetstream.ErrNoStreamResponse) is
// not one: no server took the message, nothing was stored.
func noAnswer(err error) bool {
	var oe *BucketOpenError
	var ns *notSentError
	if errors.As(err, &oe) || errors.As(err, &ns) {
		return false // nothing was sent
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.Is(err, nats.ErrTimeout)
}

// notSentError is a write never sent: the time was up (or the caller
// gone) before it, spent reading what the write needed first.
type notSentError struct{ err error }

func (e *notSentError) Error() string {
	return fmt.Sprintf("the write was never sent: %v", e.err)
}

func (e *notSentError) Unwrap() error { return e.err }

// writeFailed is the error of a KV write of key in kv that failed with
// err: an *OutcomeUnknownError when no answer came, a definite failure
// otherwise. value is what was written (nil for a delete), before the
// key's revision before the write (0: none; revUnknown: not known).
func writeFailed(kv jetstream.KeyValue, op, kind, key string, value []byte, before uint64, err error) error {
	return writeFailedIn(kv.Bucket(), op, kind, key, value, before, err)
}

func writeFailedIn(bucket, op, kind, key string, value []byte, before uint64, err error) error {
	if noAnswer(err) {
		return &OutcomeUnknownError{Op: op, Kind: kind, Bucket: bucket, Key: key, Check: checkCommand(bucket, key), Err: err, value: value, before: before}
	}
	verb := "writing"
	if op == "delete" {
		verb = "deleting"
	}
	var oe *BucketOpenError
	var ns *notSentError
	if errors.As(err, &oe) || errors.As(err, &ns) {
		return fmt.Errorf("%s %s %s: nothing was written: %w", verb, kind, key, err)
	}
	if errors.Is(err, jetstream.ErrNoStreamResponse) {
		return fmt.Errorf("%s %s %s: nothing was written: no server holds a leader of bucket %s's stream (JetStream quorum lost, or its servers down): %w", verb, kind, key, bucket, err)
	}
	return fmt.Errorf("%s %s %s: %w", verb, kind, key, err)
}

// checkCommand is the CLI command that shows a key of a bucket.
func checkCommand(bucket, key string) string {
	switch bucket {
	case BucketAPIs:
		if name, ok := strings.CutPrefix(key, DraftPrefix); ok {
			return "jetway api get --draft " + name
		}
		return "jetway api get " + key
	case BucketFlags:
		if strings.HasPrefix(key, FaultPrefix) {
			return "jetway fault list"
		}
		return "jetway degrade list"
	case BucketApps:
		return "jetway app get " + key
	case BucketAlerts:
		return "jetway alert list"
	case BucketTopics:
		return "jetway topic get " + key
	case BucketJSONSchemas:
		return "jetway jsonschema get " + key
	case BucketCerts:
		return "jetway cert list"
	case BucketSchemas:
		return "jetway schema list"
	case BucketSecrets:
		// bus.SecretKey: name.pool
		if _, pool, ok := strings.Cut(key, "."); ok {
			return "jetway secret list --pool " + pool
		}
		return "jetway secret list"
	case bus.BucketAdminTokens:
		// No command: the admin REST API's.
		return "GET /v1/tokens"
	}
	return ""
}
