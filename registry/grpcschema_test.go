package registry_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/internal/grpcdemo"
	"github.com/jetway-gw/jetway/registry"
)

func testingSet(_ *testing.T, without ...string) []byte { return grpcdemo.DescriptorSet(without...) }

func TestParseSchema(t *testing.T) {
	s, canon, err := registry.ParseSchema(testingSet(t))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(s.Digest, "sha256:") || len(s.Digest) != 71 {
		t.Fatalf("digest %q", s.Digest)
	}
	// The digest is the canonical form's: parsing that again gives it.
	if s2, _, err := registry.ParseSchema(canon); err != nil || s2.Digest != s.Digest {
		t.Fatalf("digest of the canonical form %v, %v", s2, err)
	}
	if _, err := s.FindMethod("grpc.testing.TestService/UnaryCall"); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"grpc.testing.TestService/NoSuch", "grpc.testing.NoService/UnaryCall", "grpc.testing.SimpleRequest/X"} {
		if _, err := s.FindMethod(m); err == nil {
			t.Errorf("%s found", m)
		}
	}
	// A dependency of its own missing: refused, named.
	if _, _, err := registry.ParseSchema(testingSet(t, "grpc/testing/messages.proto")); err == nil || !strings.Contains(err.Error(), "messages.proto") {
		t.Fatalf("a set without messages.proto: %v", err)
	}
	for _, bad := range [][]byte{[]byte("not protobuf at all \xff"), {}} {
		if _, _, err := registry.ParseSchema(bad); err == nil {
			t.Errorf("ParseSchema(%q) accepted", bad)
		}
	}
}

// api put refuses a grpc entry whose pinned schema is not stored or lacks
// the method: a method that does not exist never reaches a call.
func TestPublishChecksThePinnedSchema(t *testing.T) {
	s := natstest.RunServer(t)
	ctx := context.Background()
	c, err := registry.NewClient(ctx, natstest.Connect(t, s), registry.BucketOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stored, err := c.PutSchema(ctx, testingSet(t))
	if err != nil {
		t.Fatal(err)
	}
	if again, err := c.PutSchema(ctx, testingSet(t)); err != nil || again.Digest != stored.Digest {
		t.Fatalf("the same schema twice: %v %v", again, err)
	}
	entry := func(method, digest string) []byte {
		return []byte(`{"name":"g","pool":"p","route":{"method":"POST","path":"/g"},"backend":{"type":"grpc","target":"h:1","method":"` + method + `","schema":"` + digest + `"}}`)
	}
	if _, err := c.Put(ctx, entry("grpc.testing.TestService/UnaryCall", stored.Digest)); err != nil {
		t.Fatalf("publishing with a stored schema: %v", err)
	}
	missing := "sha256:" + strings.Repeat("0", 64)
	for _, tc := range []struct{ method, digest, want string }{
		{"grpc.testing.TestService/NoSuch", stored.Digest, "has no method NoSuch"},
		{"grpc.testing.TestService/UnaryCall", missing, "not found"},
	} {
		_, err := c.Put(ctx, entry(tc.method, tc.digest))
		var ve *registry.ValidationError
		if !errors.As(err, &ve) || !strings.Contains(err.Error(), tc.want) || ve.Problems[0].Path != "backend.schema" {
			t.Errorf("%s %s: %v, want a problem at backend.schema naming %q", tc.method, tc.digest, err, tc.want)
		}
	}
	list, err := c.ListSchemas(ctx)
	if err != nil || len(list) != 1 || list[0].Digest != stored.Digest || !strings.Contains(strings.Join(list[0].Services(), ","), "grpc.testing.TestService") {
		t.Fatalf("list: %v %v", list, err)
	}
}

// userSet is one file that imports a well-known type without carrying it
// (protoc without --include_imports): its canonical form adds the file.
func userSet(t *testing.T) []byte {
	t.Helper()
	user := &descriptorpb.FileDescriptorProto{
		Name: proto.String("u.proto"), Package: proto.String("u"), Syntax: proto.String("proto3"),
		Dependency: []string{"google/protobuf/timestamp.proto"},
		MessageType: []*descriptorpb.DescriptorProto{{Name: proto.String("M"), Field: []*descriptorpb.FieldDescriptorProto{{
			Name: proto.String("at"), Number: proto.Int32(1), Type: descriptorpb.FieldDescriptorProto_TYPE_MESSAGE.Enum(),
			TypeName: proto.String(".google.protobuf.Timestamp"), Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()}}}},
	}
	b, err := proto.Marshal(&descriptorpb.FileDescriptorSet{File: []*descriptorpb.FileDescriptorProto{user}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// What a digest names is the stored bytes: a value that parses to the same
// schema but is not those bytes is refused, put repairs it, and list shows
// it without failing.
func TestStoredSchemaIsItsDigest(t *testing.T) {
	s := natstest.RunServer(t)
	ctx := context.Background()
	nc := natstest.Connect(t, s)
	c, err := registry.NewClient(ctx, nc, registry.BucketOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stored, err := c.PutSchema(ctx, userSet(t))
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(ctx, registry.BucketSchemas)
	if err != nil {
		t.Fatal(err)
	}
	// The set as supplied (not its canonical form) under the canonical
	// digest, as a raw KV write could put it.
	if _, err := kv.Put(ctx, registry.SchemaKey(stored.Digest), userSet(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := registry.LoadSchema(ctx, kv, stored.Digest); err == nil || !strings.Contains(err.Error(), "hashes to") {
		t.Fatalf("a value that is not the digest's bytes: %v", err)
	}
	list, err := c.ListSchemas(ctx)
	if err != nil || len(list) != 1 || list[0].Err == nil {
		t.Fatalf("list with a bad value: %v %v", list, err)
	}
	if _, err := c.PutSchema(ctx, userSet(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := registry.LoadSchema(ctx, kv, stored.Digest); err != nil {
		t.Fatalf("after put repaired it: %v", err)
	}
}

// A set's own google/protobuf files give way to the linked-in ones: a
// redefined Timestamp cannot break protojson for the APIs pinning it.
func TestWellKnownFilesAreTheLinkedIn(t *testing.T) {
	fake := &descriptorpb.FileDescriptorProto{
		Name: proto.String("google/protobuf/timestamp.proto"), Package: proto.String("google.protobuf"), Syntax: proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{{Name: proto.String("Timestamp"), Field: []*descriptorpb.FieldDescriptorProto{{
			Name: proto.String("x"), Number: proto.Int32(7), Type: descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum(),
			Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()}}}},
	}
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(userSet(t), &set); err != nil {
		t.Fatal(err)
	}
	set.File = append([]*descriptorpb.FileDescriptorProto{fake}, set.File...)
	b, _ := proto.Marshal(&set)
	s, _, err := registry.ParseSchema(b)
	if err != nil {
		t.Fatal(err)
	}
	d, err := s.Files.FindDescriptorByName("google.protobuf.Timestamp")
	if err != nil {
		t.Fatal(err)
	}
	if f := d.(protoreflect.MessageDescriptor).Fields(); f.ByName("seconds") == nil || f.ByName("x") != nil {
		t.Fatalf("the set's own Timestamp was kept: %v", f)
	}
}
