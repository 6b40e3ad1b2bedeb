package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// publishAttempts bounds the retries of a write that lost a race with
// another write to the APIs bucket; publishPause is the most one pause
// between them lasts (jittered, growing).
const (
	publishAttempts = 10
	publishPause    = 50 * time.Millisecond
)

// publish writes js, the JSON of the validated entry a, as the new value of
// its key. The value carries the created revision of the API in force under
// that key (none for a new publication, which is then created at its own
// revision), whatever js says, so that the API keeps its claim on its route
// across edits and rollbacks. The write is refused with a
// *RouteConflictError when an API would lose its route by it.
//
// The route check reads the whole bucket, so the write is a compare-and-set
// on the whole bucket: it is taken only if no write of any key came after
// the read (the stream's last sequence) and the key is at the revision read.
// Two APIs published on one route at the same moment therefore cannot both
// succeed: the second is read again, checked again, and refused. A write
// that lost such a race is repeated (publishAttempts, within ctx). With
// IfRevision the key must be at the caller's revision (0: not exist), or
// the write fails with a *ConflictError, whatever else happened.
func (c *Client) publish(ctx context.Context, a *API, js []byte, opts []WriteOption) (*API, error) {
	if err := c.checkSharedRefs(ctx, "validate", a.Validate); err != nil {
		return nil, err
	}
	if a.Sandbox != nil {
		if err := c.checkSharedRefs(ctx, "sandbox.validate", a.Sandbox.Validate); err != nil {
			return nil, err
		}
	}
	if err := c.checkSchemaRef(ctx, "backend.schema", &a.Backend); err != nil {
		return nil, err
	}
	if err := c.checkSecretRef(ctx, "backend.server.secret", a.Pool, &a.Backend); err != nil {
		return nil, err
	}
	for i := range a.Channels {
		b := &a.Channels[i].Backend
		if err := c.checkSchemaRef(ctx, fmt.Sprintf("channels[%d].backend.schema", i), b); err != nil {
			return nil, err
		}
		if err := c.checkSecretRef(ctx, fmt.Sprintf("channels[%d].backend.server.secret", i), a.Pool, b); err != nil {
			return nil, err
		}
	}
	if a.Sandbox != nil {
		if err := c.checkSchemaRef(ctx, "sandbox.backend.schema", &a.Sandbox.Backend); err != nil {
			return nil, err
		}
		if err := c.checkSecretRef(ctx, "sandbox.backend.server.secret", a.Sandbox.Pool, &a.Sandbox.Backend); err != nil {
			return nil, err
		}
	}
	o := collect(opts)
	key := a.StoreKey()
	pause := 2 * time.Millisecond
	for attempt := 1; ; attempt++ {
		seq, err := c.apisLastSeq(ctx)
		if err != nil {
			return nil, err
		}
		inForce, latest, live, err := c.allInForce(ctx)
		if err != nil {
			return nil, err
		}
		if o.ifRevision != nil {
			cur := latest[key]
			if !live[key] {
				cur = 0 // never written, or deleted: does not exist
			}
			if cur != *o.ifRevision {
				return nil, &ConflictError{Kind: "api", Key: key, Want: *o.ifRevision, Current: cur}
			}
		}
		next := *a
		next.Created, next.Revision = math.MaxUint64, math.MaxUint64 // published last
		var created uint64
		if cur := inForce[key]; cur != nil {
			created, next.Created = cur.Created, cur.Created
		}
		if err := checkViews(inForce, &next); err != nil {
			return nil, err
		}
		val, err := withCreated(js, created)
		if err != nil {
			return nil, fmt.Errorf("writing %s: %w", key, err)
		}
		ack, err := c.js.Publish(ctx, kvSubject(BucketAPIs, key), val,
			jetstream.WithExpectLastSequence(seq), jetstream.WithExpectLastSequencePerSubject(latest[key]))
		if isWrongLastSeq(err) && attempt < publishAttempts {
			// Another write came between the read and this one: read
			// again (the route check and IfRevision included).
			if err := sleepCtx(ctx, pause/2+rand.N(pause/2+1)); err != nil {
				return nil, fmt.Errorf("writing %s: %w", key, err)
			}
			pause = min(2*pause, publishPause)
			continue
		}
		if err != nil {
			return nil, writeFailedIn(BucketAPIs, "put", "api", key, val, latest[key], err)
		}
		a.Revision, a.Created = ack.Sequence, created
		if created == 0 {
			a.Created = ack.Sequence
		}
		return a, nil
	}
}

// apisLastSeq is the sequence of the newest message in the APIs bucket's
// stream: every write of any key comes after it.
func (c *Client) apisLastSeq(ctx context.Context) (uint64, error) {
	st, err := c.js.Stream(ctx, "KV_"+BucketAPIs)
	if err != nil {
		return 0, fmt.Errorf("reading apis: %w", err)
	}
	return st.CachedInfo().State.LastSeq, nil
}

// kvSubject is the subject a KV write of key in bucket is published on.
func kvSubject(bucket, key string) string { return "$KV." + bucket + "." + key }

// isWrongLastSeq reports whether a publish was refused by its expected
// sequence (10071; 10164 on replicated streams).
func isWrongLastSeq(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// allInForce reads the APIs every node serves: the newest value of each key,
// or for a key whose newest value is invalid the newest valid one since the
// key was last deleted (as the watcher falls back). latest is each key's
// newest revision, deletions included, and live says whose newest is a
// value (not a deletion).
func (c *Client) allInForce(ctx context.Context) (apis map[string]*API, latest map[string]uint64, live map[string]bool, err error) {
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	w, err := c.kv.WatchAll(wctx)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("reading apis: %w", err)
	}
	defer func() { _ = w.Stop() }()
	apis, latest, live = map[string]*API{}, map[string]uint64{}, map[string]bool{}
	invalid := map[string]bool{}
	for done := false; !done; {
		select {
		case <-wctx.Done():
			return nil, nil, nil, fmt.Errorf("reading apis: %w", wctx.Err())
		case e, ok := <-w.Updates():
			switch {
			case !ok:
				return nil, nil, nil, errors.New("reading apis: watch closed")
			case e == nil: // replay done
				done = true
				continue
			}
			key := e.Key()
			latest[key] = e.Revision()
			live[key] = e.Operation() == jetstream.KeyValuePut
			delete(apis, key)
			delete(invalid, key)
			if e.Operation() != jetstream.KeyValuePut {
				continue
			}
			if a, err := parseAPIAt(key, e.Value(), e.Revision()); err == nil {
				apis[key] = a
			} else {
				invalid[key] = true
			}
		}
	}
	for key := range invalid {
		hs, err := c.kv.History(wctx, key)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("reading history of %s: %w", key, err)
		}
		if a, _, ok := lastGood(hs, math.MaxUint64, parseAPIEntry); ok {
			apis[key] = a
		}
	}
	return apis, latest, live, nil
}

// withCreated returns the JSON object js with its created_revision member
// set to created (removed when created is 0), the other members unchanged
// and in their order.
func withCreated(js []byte, created uint64) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, errors.New("entry is not a JSON object")
	}
	var out bytes.Buffer
	out.WriteByte('{')
	sep := func() {
		if out.Len() > 1 {
			out.WriteByte(',')
		}
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		if key == "created_revision" {
			continue
		}
		sep()
		k, _ := json.Marshal(key)
		out.Write(k)
		out.WriteByte(':')
		out.Write(v)
	}
	if created > 0 {
		sep()
		out.WriteString(`"created_revision":` + strconv.FormatUint(created, 10))
	}
	out.WriteByte('}')
	return out.Bytes(), nil
}
