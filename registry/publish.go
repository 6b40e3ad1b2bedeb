package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// publishAttempts bounds the retries of a write that lost a race with
// another write of the same key.
const publishAttempts = 3

// publish writes js, the JSON of the validated entry a, as the new value of
// its key. The value carries the created revision of the API in force under
// that key (none for a new publication, which is then created at its own
// revision), whatever js says, so that the API keeps its claim on its route
// across edits and rollbacks. The write is refused with a
// *RouteConflictError when an API would lose its route by it.
//
// The write is a compare-and-set on the key's newest revision: a concurrent
// delete or edit of the same key is never overwritten with a stale created
// revision; the read and check are then repeated. With IfRevision the
// write expects the caller's revision instead and is not repeated: a
// mismatch is a *ConflictError.
func (c *Client) publish(ctx context.Context, a *API, js []byte, opts []WriteOption) (*API, error) {
	o := collect(opts)
	for attempt := 1; ; attempt++ {
		inForce, latest, err := c.allInForce(ctx)
		if err != nil {
			return nil, err
		}
		next := *a
		next.Created, next.Revision = math.MaxUint64, math.MaxUint64 // published last
		var created uint64
		if cur := inForce[a.Name]; cur != nil {
			created, next.Created = cur.Created, cur.Created
		}
		if err := checkRoutes(inForce, &next); err != nil {
			return nil, err
		}
		val, err := withCreated(js, created)
		if err != nil {
			return nil, fmt.Errorf("writing %s: %w", a.Name, err)
		}
		var rev uint64
		switch {
		case o.ifRevision == nil:
			rev, err = c.kv.Update(ctx, a.Name, val, latest[a.Name])
			if errors.Is(err, jetstream.ErrKeyRevisionMismatch) && attempt < publishAttempts {
				continue
			}
		case *o.ifRevision == 0:
			rev, err = c.kv.Create(ctx, a.Name, val)
		default:
			rev, err = c.kv.Update(ctx, a.Name, val, *o.ifRevision)
		}
		if o.ifRevision != nil && isConflict(err) {
			return nil, conflict(ctx, c.kv, "api", a.Name, *o.ifRevision)
		}
		if err != nil {
			return nil, fmt.Errorf("writing %s: %w", a.Name, err)
		}
		a.Revision, a.Created = rev, created
		if created == 0 {
			a.Created = rev
		}
		return a, nil
	}
}

// allInForce reads the APIs every node serves: the newest value of each key,
// or for a key whose newest value is invalid the newest valid one since the
// key was last deleted (as the watcher falls back). latest is each key's
// newest revision, deletions included.
func (c *Client) allInForce(ctx context.Context) (apis map[string]*API, latest map[string]uint64, err error) {
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	w, err := c.kv.WatchAll(wctx)
	if err != nil {
		return nil, nil, fmt.Errorf("reading apis: %w", err)
	}
	defer func() { _ = w.Stop() }()
	apis, latest = map[string]*API{}, map[string]uint64{}
	invalid := map[string]bool{}
	for done := false; !done; {
		select {
		case <-wctx.Done():
			return nil, nil, fmt.Errorf("reading apis: %w", wctx.Err())
		case e, ok := <-w.Updates():
			switch {
			case !ok:
				return nil, nil, errors.New("reading apis: watch closed")
			case e == nil: // replay done
				done = true
				continue
			}
			key := e.Key()
			latest[key] = e.Revision()
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
			return nil, nil, fmt.Errorf("reading history of %s: %w", key, err)
		}
		for i := len(hs) - 1; i >= 0 && hs[i].Operation() == jetstream.KeyValuePut; i-- {
			if a, err := parseAPIAt(key, hs[i].Value(), hs[i].Revision()); err == nil {
				apis[key] = a
				break
			}
		}
	}
	return apis, latest, nil
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
