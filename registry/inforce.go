package registry

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// InForce is what every node serves for one API key, as the watcher decides
// it: the newest value when it is valid, otherwise the newest valid revision
// before it (a raw KV write that fails validation is skipped, and the last
// good version stays in force).
type InForce struct {
	// Entry is the revision in force and API its parsed form; both are
	// zero when nothing valid is in force (the newest value is invalid and
	// no valid one precedes it since the key was last deleted).
	Entry Entry
	API   *API
	// Newest is the key's newest value when it is not the one in force,
	// and NewestErr why it is not served.
	Newest    *Entry
	NewestErr error
}

// GetInForce returns what is in force for an API (see InForce), reading the
// key's history only when its newest value is invalid.
func (c *Client) GetInForce(ctx context.Context, name string) (InForce, error) {
	e, err := c.Get(ctx, name)
	if err != nil {
		return InForce{}, err
	}
	return c.inForce(ctx, e)
}

func (c *Client) inForce(ctx context.Context, e Entry) (InForce, error) {
	a, perr := parseAPIAt(e.Name, e.Value, e.Revision)
	if perr == nil {
		return InForce{Entry: e, API: a}, nil
	}
	out := InForce{Newest: &e, NewestErr: perr}
	hs, err := c.kv.History(ctx, e.Name)
	if err != nil {
		return out, fmt.Errorf("reading history of %s: %w", e.Name, err)
	}
	if a, h, ok := lastGood(hs, e.Revision, parseAPIEntry); ok {
		out.Entry, out.API = toEntry(h), a
	}
	return out, nil
}

// parseAPIEntry parses a stored API entry at its revision.
func parseAPIEntry(e jetstream.KeyValueEntry) (*API, error) {
	return parseAPIAt(e.Key(), e.Value(), e.Revision())
}

// ListInForce is List with what is in force for each API.
func (c *Client) ListInForce(ctx context.Context) ([]InForce, error) {
	es, err := c.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]InForce, 0, len(es))
	for _, e := range es {
		if e.Err != nil { // a key that cannot be read (a raw write on a wildcard key)
			out = append(out, InForce{Newest: &e, NewestErr: e.Err})
			continue
		}
		f, err := c.inForce(ctx, e)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

// GetRevision returns one kept revision of an API's entry.
func (c *Client) GetRevision(ctx context.Context, name string, revision uint64) (Entry, error) {
	e, err := c.kv.GetRevision(ctx, name, revision)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Entry{}, fmt.Errorf("api %s revision %d: %w", name, revision, ErrNotFound)
	}
	if err != nil {
		return Entry{}, fmt.Errorf("reading %s revision %d: %w", name, revision, err)
	}
	return toEntry(e), nil
}
