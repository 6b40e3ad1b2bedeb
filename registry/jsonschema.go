package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/schemas"
)

// BucketJSONSchemas holds the JSON Schemas that request validations share:
// key = the schema's name, value = the schema itself. An API's validate
// block references one as {"$ref": "jetway:NAME"}. Admin writes, edges
// read (they validate).
const BucketJSONSchemas = bus.BucketJSONSchemas

// MaxJSONSchema bounds a shared schema's size.
const MaxJSONSchema = 256 << 10

// JSONSchema is one shared schema.
type JSONSchema struct {
	Name     string
	Schema   json.RawMessage
	Revision uint64
}

// ParseJSONSchema checks a shared schema stored under key: a valid name,
// and a JSON Schema (2020-12) that compiles, its own references to other
// shared schemas taken on trust (they are checked where they are stored).
func ParseJSONSchema(key string, doc []byte) (*JSONSchema, error) {
	var ps []schemas.Problem
	if err := bus.ValidName(key); err != nil {
		ps = append(ps, schemas.Problem{Path: "name", Message: err.Error()})
	}
	js, err := ToJSON(doc)
	switch {
	case err != nil:
		ps = append(ps, schemas.Problem{Message: err.Error()})
	case len(js) > MaxJSONSchema:
		ps = append(ps, schemas.Problem{Message: fmt.Sprintf("is %d bytes; at most %d", len(js), MaxJSONSchema)})
	default:
		_, problems := schemas.CompileRequest(map[string]json.RawMessage{schemas.PartBody: js}, nil, schemas.AnyShared)
		for _, p := range problems {
			p.Path = strings.TrimPrefix(strings.TrimPrefix(p.Path, schemas.PartBody), ".")
			ps = append(ps, p)
		}
	}
	if len(ps) > 0 {
		return nil, &ValidationError{Key: key, Problems: ps}
	}
	return &JSONSchema{Name: key, Schema: js}, nil
}

// OpenJSONSchemas opens the jetway_jsonschemas bucket, creating it when
// missing.
func OpenJSONSchemas(ctx context.Context, js jetstream.JetStream, o BucketOptions) (jetstream.KeyValue, error) {
	return openBucket(ctx, js, jetstream.KeyValueConfig{
		Bucket:       BucketJSONSchemas,
		Description:  "Jetway JSON Schemas shared by request validations (key = name; $ref jetway:NAME): admin writes, edges read",
		History:      HistoryDepth,
		Replicas:     max(o.Replicas, 1),
		MaxValueSize: MaxJSONSchema,
	})
}

// PutJSONSchema checks and stores a shared schema. Every edge recompiles
// the validations that reference it. It is refused when its own shared
// references are not stored, or when an API or another shared schema that
// uses it would no longer compile with it (a fragment it no longer has).
func (c *Client) PutJSONSchema(ctx context.Context, name string, doc []byte, opts ...WriteOption) (*JSONSchema, error) {
	s, err := ParseJSONSchema(name, doc)
	if err != nil {
		return nil, err
	}
	if err := c.checkSharedChange(ctx, name, s.Schema); err != nil {
		return nil, err
	}
	rev, err := write(ctx, c.jsonSchemas, "json schema", name, s.Schema, opts)
	if err != nil {
		return nil, c.notedLater(err, "jsonschema", "put", name)
	}
	s.Revision = rev
	return s, c.noted(ctx, "jsonschema", "put", name, rev, nil)
}

// checkSharedChange compiles, against the shared schemas as they would be
// with name set to doc (nil: deleted), the schema itself and everything
// that could use it: every stored shared schema and every API's validation
// (both tiers). A problem in any is the change's. Not atomic with the
// write: an API published meanwhile is checked by its own put.
func (c *Client) checkSharedChange(ctx context.Context, name string, doc []byte) error {
	state := map[string][]byte{}
	stored, err := c.ListJSONSchemas(ctx)
	if err != nil {
		return err
	}
	for _, l := range stored {
		if l.Err == nil {
			state[l.Key] = l.Value.Schema
		}
	}
	if doc == nil {
		delete(state, name)
	} else {
		state[name] = doc
	}
	lookup := func(n string) ([]byte, bool) { d, ok := state[n]; return d, ok }
	var ps []schemas.Problem
	for n, d := range state {
		_, problems := schemas.CompileRequest(map[string]json.RawMessage{schemas.PartBody: d}, nil, lookup)
		for _, p := range problems {
			ps = append(ps, schemas.Problem{Path: "json schema " + n, Message: p.Message})
		}
	}
	apis, err := c.List(ctx)
	if err != nil {
		return err
	}
	for _, e := range apis {
		if e.Op != "PUT" || e.Err != nil {
			continue
		}
		a, err := ParseAPI(e.Name, e.Value)
		if err != nil {
			continue // an entry no node serves
		}
		tiers := map[string]*Validate{"validate": a.Validate}
		if a.Sandbox != nil {
			tiers["sandbox.validate"] = a.Sandbox.Validate
		}
		for path, v := range tiers {
			if v == nil {
				continue
			}
			if _, problems := v.Compile(lookup); len(problems) > 0 {
				ps = append(ps, schemas.Problem{Path: "api " + a.StoreKey() + " " + path, Message: problems[0].String()})
			}
		}
	}
	if len(ps) == 0 {
		return nil
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].Path < ps[j].Path })
	return &ValidationError{Key: name, Problems: ps}
}

// GetJSONSchema returns a shared schema.
func (c *Client) GetJSONSchema(ctx context.Context, name string) (*JSONSchema, error) {
	e, err := c.jsonSchemas.Get(ctx, name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("json schema %s: %w", name, ErrNotFound)
	} else if err != nil {
		return nil, fmt.Errorf("reading json schema %s: %w", name, err)
	}
	return &JSONSchema{Name: name, Schema: e.Value(), Revision: e.Revision()}, nil
}

// ListJSONSchemas returns every shared schema, sorted by name.
func (c *Client) ListJSONSchemas(ctx context.Context) ([]Listed[*JSONSchema], error) {
	return listParsed(ctx, c.jsonSchemas, ParseJSONSchema)
}

// DeleteJSONSchema removes a shared schema, unless an API's validation
// (either tier) or another shared schema uses it, directly or through
// others: those would refuse every call.
func (c *Client) DeleteJSONSchema(ctx context.Context, name string) error {
	if _, err := c.GetJSONSchema(ctx, name); err != nil {
		return err
	}
	if err := c.checkSharedChange(ctx, name, nil); err != nil {
		return fmt.Errorf("json schema %s is in use: %w", name, err)
	}
	if err := c.jsonSchemas.Delete(ctx, name); err != nil {
		return c.notedLater(writeFailed(c.jsonSchemas, "delete", "json schema", name, nil, 0, err), "jsonschema", "delete", name)
	}
	return c.noted(ctx, "jsonschema", "delete", name, 0, nil)
}

// checkSharedRefs checks, at publish, that every shared schema a
// validation references is stored and that it compiles with them.
func (c *Client) checkSharedRefs(ctx context.Context, path string, v *Validate) error {
	if v == nil {
		return nil
	}
	var lookupErr error
	_, problems := v.Compile(func(name string) ([]byte, bool) {
		s, err := c.GetJSONSchema(ctx, name)
		if err != nil {
			if !errors.Is(err, ErrNotFound) {
				lookupErr = err
			}
			return nil, false
		}
		return s.Schema, true
	})
	if lookupErr != nil {
		return lookupErr
	}
	if len(problems) == 0 {
		return nil
	}
	for i := range problems {
		problems[i].Path = path + "." + problems[i].Path
	}
	return &ValidationError{Problems: problems}
}
