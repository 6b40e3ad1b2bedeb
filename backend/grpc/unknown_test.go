package grpcbackend

import (
	"context"
	"fmt"
	"testing"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// hasUnknown finds fields a message's schema lacks wherever they are: at
// its top level, in a nested message, in a list's or a map's messages.
func TestHasUnknown(t *testing.T) {
	compile := func(src string) protoreflect.MessageDescriptor {
		t.Helper()
		comp := protocompile.Compiler{Resolver: &protocompile.SourceResolver{
			Accessor: protocompile.SourceAccessorFromMap(map[string]string{"u.proto": src}),
		}}
		files, err := comp.Compile(context.Background(), "u.proto")
		if err != nil {
			t.Fatal(err)
		}
		return files[0].Messages().ByName("M")
	}
	const shape = `syntax = "proto3"; package u;
message In { string c = 1; %s }
message M { string a = 1; In one = 2; repeated In many = 3; map<string, In> named = 4; %s }`
	old := compile(fmt.Sprintf(shape, "", ""))
	grown := compile(fmt.Sprintf(shape, "string d = 2;", "string b = 5;"))
	for _, tc := range []struct {
		json string
		want bool
	}{
		{`{"a":"x","one":{"c":"c"},"many":[{"c":"c"}],"named":{"k":{"c":"c"}}}`, false},
		{`{"b":"top"}`, true},
		{`{"one":{"d":"deep"}}`, true},
		{`{"many":[{"c":"c"},{"d":"deep"}]}`, true},
		{`{"named":{"k":{"c":"c"},"l":{"d":"deep"}}}`, true},
	} {
		m := dynamicpb.NewMessage(grown)
		if err := protojson.Unmarshal([]byte(tc.json), m); err != nil {
			t.Fatal(err)
		}
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		read := dynamicpb.NewMessage(old)
		if err := proto.Unmarshal(b, read); err != nil {
			t.Fatal(err)
		}
		if got := hasUnknown(read); got != tc.want {
			t.Errorf("%s read with the old schema: hasUnknown %v, want %v", tc.json, got, tc.want)
		}
	}
}
