package registry

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/schemas"
)

// BucketSchemas holds the gRPC schemas that grpc backends name instead of
// asking the server's reflection: key = sha256-<hex> of the value, a
// self-contained FileDescriptorSet (dependencies included). Content
// addressed, so an entry pins its schema exactly and every worker uses the
// same one; the API's history shows when its schema changed. The admin
// writes it, workers read it.
const BucketSchemas = bus.BucketSchemas

// MaxSchemaSize bounds one stored schema.
const MaxSchemaSize = 4 << 20

// schemaDigest is how an entry names a schema: sha256:<64 hex digits>.
var schemaDigest = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// SchemaKey is the KV key of the schema with digest ("sha256:<hex>").
func SchemaKey(digest string) string { return strings.Replace(digest, ":", "-", 1) }

// Schema is a parsed, stored gRPC schema.
type Schema struct {
	Digest string
	Files  *protoregistry.Files
	Size   int
	Err    error // set by ListSchemas for a stored value that does not load
}

// ParseSchema reads a FileDescriptorSet: every file's dependencies must
// be in the set, except the well-known types linked into Jetway
// (google/protobuf/*.proto), which are added. It returns the set in its
// canonical form (deterministic marshalling) with its digest.
func ParseSchema(b []byte) (*Schema, []byte, error) {
	if len(b) > MaxSchemaSize {
		return nil, nil, fmt.Errorf("schema is %d bytes, over the %d byte limit", len(b), MaxSchemaSize)
	}
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(b, &set); err != nil {
		return nil, nil, fmt.Errorf("not a FileDescriptorSet (protoc --include_imports -o, buf build -o): %v", err)
	}
	if len(set.File) == 0 {
		return nil, nil, errors.New("the FileDescriptorSet has no files")
	}
	withWellKnown(&set)
	files, err := protodesc.NewFiles(&set)
	if err != nil {
		return nil, nil, fmt.Errorf("the FileDescriptorSet does not link: %v", err)
	}
	canon, err := proto.MarshalOptions{Deterministic: true}.Marshal(&set)
	if err != nil {
		return nil, nil, err
	}
	if len(canon) > MaxSchemaSize {
		return nil, nil, fmt.Errorf("schema is %d bytes with its dependencies, over the %d byte limit", len(canon), MaxSchemaSize)
	}
	sum := sha256.Sum256(canon)
	return &Schema{Digest: "sha256:" + hex.EncodeToString(sum[:]), Files: files, Size: len(canon)}, canon, nil
}

// withWellKnown puts the linked-in well-known files (google/protobuf/*)
// a set imports in place of the set's own copies, or adds them when the
// set lacks them (protoc without --include_imports), before the files that
// need them.
func withWellKnown(set *descriptorpb.FileDescriptorSet) {
	// A set's own copy of a well-known file is replaced by the linked-in
	// one: a redefined google.protobuf.Timestamp would make protojson
	// (which knows the real one) fail on every call.
	own := set.File[:0]
	for _, f := range set.File {
		if _, err := protoregistry.GlobalFiles.FindFileByPath(f.GetName()); err == nil && strings.HasPrefix(f.GetName(), "google/protobuf/") {
			continue
		}
		own = append(own, f)
	}
	set.File = own
	have := map[string]bool{}
	for _, f := range set.File {
		have[f.GetName()] = true
	}
	var add []*descriptorpb.FileDescriptorProto
	var need func(name string)
	need = func(name string) {
		if have[name] {
			return
		}
		fd, err := protoregistry.GlobalFiles.FindFileByPath(name)
		if err != nil || !strings.HasPrefix(name, "google/protobuf/") {
			return // NewFiles names what is missing
		}
		have[name] = true
		for i := 0; i < fd.Imports().Len(); i++ {
			need(fd.Imports().Get(i).Path())
		}
		add = append(add, protodesc.ToFileDescriptorProto(fd))
	}
	for _, f := range set.File {
		for _, d := range f.Dependency {
			need(d)
		}
	}
	set.File = append(add, set.File...)
}

// FindMethod finds package.Service/Method in the schema.
func (s *Schema) FindMethod(fullMethod string) (protoreflect.MethodDescriptor, error) {
	svc, name, _ := strings.Cut(fullMethod, "/")
	d, err := s.Files.FindDescriptorByName(protoreflect.FullName(svc))
	if err != nil {
		return nil, fmt.Errorf("schema %s has no service %s", s.Digest, svc)
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return nil, fmt.Errorf("schema %s: %s is not a service", s.Digest, svc)
	}
	md := sd.Methods().ByName(protoreflect.Name(name))
	if md == nil {
		return nil, fmt.Errorf("schema %s: service %s has no method %s", s.Digest, svc, name)
	}
	return md, nil
}

// Services lists the schema's services, sorted.
func (s *Schema) Services() []string {
	var out []string
	if s.Files == nil {
		return nil
	}
	s.Files.RangeFiles(func(f protoreflect.FileDescriptor) bool {
		for i := 0; i < f.Services().Len(); i++ {
			out = append(out, string(f.Services().Get(i).FullName()))
		}
		return true
	})
	slices.Sort(out)
	return out
}

// OpenSchemas opens the jetway_schemas bucket, creating it when missing.
func OpenSchemas(ctx context.Context, js jetstream.JetStream, o BucketOptions) (jetstream.KeyValue, error) {
	return openBucket(ctx, js, jetstream.KeyValueConfig{
		Bucket:       BucketSchemas,
		Description:  "Jetway gRPC schemas (key = sha256-<hex> of the FileDescriptorSet): admin writes, workers read",
		History:      1, // content addressed: a key never changes
		MaxValueSize: MaxSchemaSize,
		Replicas:     max(o.Replicas, 1),
	})
}

// LoadSchema reads and checks the schema with digest from kv: its bytes
// must hash to the digest.
func LoadSchema(ctx context.Context, kv jetstream.KeyValue, digest string) (*Schema, error) {
	if !schemaDigest.MatchString(digest) {
		return nil, fmt.Errorf("schema %q is not a sha256:<hex> digest", digest)
	}
	e, err := kv.Get(ctx, SchemaKey(digest))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("schema %s: %w (jetway schema put stores it)", digest, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("reading schema %s: %w", digest, err)
	}
	return verifySchema(digest, e.Value())
}

// verifySchema parses a stored schema whose bytes must hash to digest:
// what a digest names is those bytes, whatever another worker's protobuf
// library would write for them.
func verifySchema(digest string, b []byte) (*Schema, error) {
	sum := sha256.Sum256(b)
	if got := "sha256:" + hex.EncodeToString(sum[:]); got != digest {
		return nil, fmt.Errorf("schema stored as %s hashes to %s: it is not what was stored (put it again)", digest, got)
	}
	s, _, err := ParseSchema(b)
	if err != nil {
		return nil, fmt.Errorf("schema %s: %w", digest, err)
	}
	s.Digest, s.Size = digest, len(b)
	return s, nil
}

// PutSchema stores a FileDescriptorSet and returns it parsed, with the
// digest entries name it by. Storing the same schema twice is a no-op.
func (c *Client) PutSchema(ctx context.Context, b []byte) (*Schema, error) {
	s, canon, err := ParseSchema(b)
	if err != nil {
		return nil, err
	}
	key := SchemaKey(s.Digest)
	var before uint64
	rev, err := c.schemas.Create(ctx, key, canon)
	if errors.Is(err, jetstream.ErrKeyExists) {
		// Stored already; a value that is not these bytes (written raw)
		// is repaired, or every entry pinning the digest would fail.
		e, gerr := c.schemas.Get(ctx, key)
		if gerr == nil && bytes.Equal(e.Value(), canon) {
			return s, nil
		}
		if gerr == nil {
			before = e.Revision()
		} else {
			before = revUnknown // an older write of these bytes could not be told apart
		}
		rev, err = c.schemas.Put(ctx, key, canon)
	}
	if err != nil {
		return nil, c.notedLater(writeFailed(c.schemas, "put", "schema", key, canon, before, err), "schema", "put", s.Digest)
	}
	return s, c.noted(ctx, "schema", "put", s.Digest, rev, nil)
}

// ListSchemas returns every stored schema, by digest; one that does not
// load (a value written raw) is listed with its Err.
func (c *Client) ListSchemas(ctx context.Context) ([]*Schema, error) {
	keys, err := c.schemas.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	var out []*Schema
	for k := range keys.Keys() {
		digest := strings.Replace(k, "-", ":", 1)
		s, err := LoadSchema(ctx, c.schemas, digest)
		if err != nil {
			s = &Schema{Digest: digest, Err: err}
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b *Schema) int { return strings.Compare(a.Digest, b.Digest) })
	return out, nil
}

// checkSchemaRef checks, at publish, that a grpc backend's schema is
// stored and has its method: a method that does not exist is refused
// before any call.
func (c *Client) checkSchemaRef(ctx context.Context, path string, b *Backend) error {
	if b == nil || b.Type != BackendGRPC || b.Schema == "" {
		return nil
	}
	s, err := LoadSchema(ctx, c.schemas, b.Schema)
	if err == nil {
		_, err = s.FindMethod(b.Method)
	}
	if err != nil {
		return &ValidationError{Key: "", Problems: []schemas.Problem{{Path: path, Message: err.Error()}}}
	}
	return nil
}
