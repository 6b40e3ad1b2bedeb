package grpcbackend

import (
	"context"
	"encoding/json"
	"net/url"
	"testing"

	"github.com/bufbuild/protocompile"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
	_ "google.golang.org/protobuf/types/known/wrapperspb" // google/protobuf/wrappers.proto in GlobalFiles
)

// unaryCall is grpc.testing.TestService/UnaryCall as reflection would give
// it (here from the compiled descriptors).
func unaryCall() *method {
	fd := testpb.File_grpc_testing_test_proto
	md := fd.Services().ByName("TestService").Methods().ByName("UnaryCall")
	return &method{desc: md, path: "/grpc.testing.TestService/UnaryCall", types: typesOf(fd)}
}

// A parameter replaces what the body gave its field, zero values and
// wrappers included: the route matched the path, so the path wins.
func TestParametersWinOverTheBody(t *testing.T) {
	m := unaryCall()
	for _, tc := range []struct{ body, params, query, want string }{
		{`{"responseSize":7}`, "responseSize=0", "", `{}`},
		{`{"responseSize":7}`, "responseSize=9", "", `{"responseSize":9}`},
		{`{"fillUsername":true}`, "", "fillUsername=false", `{}`},
		{`{"payload":{"type":"COMPRESSABLE","body":"eA=="}}`, "", "payload.type=0", `{"payload":{"body":"eA=="}}`},
		{``, "", "payload.type=COMPRESSABLE&responseSize=3", `{"responseSize":3,"payload":{}}`},
	} {
		p, _ := url.ParseQuery(tc.params)
		q, _ := url.ParseQuery(tc.query)
		msg, err := requestMessage(m, []byte(tc.body), p, q, false)
		if err != nil {
			t.Errorf("%s %s %s: %v", tc.body, tc.params, tc.query, err)
			continue
		}
		b, _ := protojson.Marshal(msg)
		var got, want any
		_ = json.Unmarshal(b, &got)
		_ = json.Unmarshal([]byte(tc.want), &want)
		if gb, _ := json.Marshal(got); string(gb) != mustJSON(want) {
			t.Errorf("body %s params %q query %q: %s, want %s", tc.body, tc.params, tc.query, gb, tc.want)
		}
	}
}

func mustJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

// A google.protobuf.BoolValue takes true and false from a parameter, as
// its JSON form is the bool's.
func TestWrapperFromAParameter(t *testing.T) {
	fdp := &descriptorpb.FileDescriptorProto{
		Name: proto.String("w.proto"), Package: proto.String("w"), Syntax: proto.String("proto3"),
		Dependency: []string{"google/protobuf/wrappers.proto"},
		MessageType: []*descriptorpb.DescriptorProto{{Name: proto.String("Req"), Field: []*descriptorpb.FieldDescriptorProto{{
			Name: proto.String("flag"), JsonName: proto.String("flag"), Number: proto.Int32(1),
			Type: descriptorpb.FieldDescriptorProto_TYPE_MESSAGE.Enum(), TypeName: proto.String(".google.protobuf.BoolValue"),
			Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(),
		}}}},
		Service: []*descriptorpb.ServiceDescriptorProto{{Name: proto.String("S"), Method: []*descriptorpb.MethodDescriptorProto{{
			Name: proto.String("M"), InputType: proto.String(".w.Req"), OutputType: proto.String(".w.Req")}}}},
	}
	fd, err := protodesc.NewFile(fdp, protoregistry.GlobalFiles)
	if err != nil {
		t.Fatal(err)
	}
	m := &method{desc: fd.Services().Get(0).Methods().Get(0), types: typesOf(fd)}
	for v, want := range map[string]string{"true": `{"flag":true}`, "false": `{"flag":false}`} {
		msg, err := requestMessage(m, nil, nil, url.Values{"flag": {v}}, false)
		if err != nil {
			t.Fatalf("flag=%s: %v", v, err)
		}
		var got any
		b, _ := protojson.Marshal(msg)
		_ = json.Unmarshal(b, &got)
		if mustJSON(got) != want {
			t.Errorf("flag=%s: %s, want %s", v, b, want)
		}
	}
}

// int64_as_numbers unquotes exactly the 64-bit integers, wherever they
// are: fields, lists, map values, nested messages, the wrappers.
func TestInt64AsNumbers(t *testing.T) {
	comp := protocompile.Compiler{Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
		Accessor: protocompile.SourceAccessorFromMap(map[string]string{"n.proto": `syntax = "proto3"; package n;
import "google/protobuf/wrappers.proto";
message Inner { uint64 big = 1; string id = 2; }
message M { int64 a = 1; repeated sint64 b = 2; map<string, fixed64> c = 3; Inner inner = 4;
  google.protobuf.Int64Value w = 5; string s = 6; int32 small = 7; }`}),
	})}
	files, err := comp.Compile(context.Background(), "n.proto")
	if err != nil {
		t.Fatal(err)
	}
	md := files[0].Messages().ByName("M")
	msg := dynamicpb.NewMessage(md)
	in := `{"a":"-9007199254740993","b":["1","-2"],"c":{"k":"18446744073709551615"},"inner":{"big":"7","id":"42"},"w":"5","s":"10","small":3}`
	if err := protojson.Unmarshal([]byte(in), msg); err != nil {
		t.Fatal(err)
	}
	b, _ := protojson.Marshal(msg)
	got, err := int64sAsNumbers(b, md)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"a":-9007199254740993,"b":[1,-2],"c":{"k":18446744073709551615},"inner":{"big":7,"id":"42"},"s":"10","small":3,"w":5}`
	if string(got) != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}
