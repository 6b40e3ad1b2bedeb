package registry_test

import (
	"context"
	"errors"
	"strings"
	"testing"

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
