// Package grpcdemo is a gRPC server for the demo (jetway serve --demo) and
// the tests: grpc-go's interop test service (grpc.testing.TestService) with
// server reflection on, so Jetway calls it with no generated code.
//
// It follows the interop conventions: UnaryCall echoes the payload (or
// returns response_status, with a google.rpc.ErrorInfo detail), echoes the
// x-grpc-test-echo-initial header as header metadata and
// x-grpc-test-echo-trailing-bin as a trailer, and StreamingOutputCall sends
// one message per response_parameters entry, after interval_us.
package grpcdemo

import (
	"bytes"
	"context"
	"net"
	"slices"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

// Server implements grpc.testing.TestService.
type Server struct {
	testpb.UnimplementedTestServiceServer
	// Hostname is returned in every SimpleResponse.
	Hostname string
}

// Start serves the test service with reflection on l until Stop.
func Start(l net.Listener, hostname string) *grpc.Server {
	s := grpc.NewServer()
	testpb.RegisterTestServiceServer(s, &Server{Hostname: hostname})
	reflection.Register(s)
	go func() { _ = s.Serve(l) }()
	return s
}

// EmptyCall answers nothing.
func (*Server) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	return &testpb.Empty{}, nil
}

// UnaryCall echoes the request's payload, or fails with its
// response_status.
func (s *Server) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	echoMetadata(ctx)
	if rs := req.GetResponseStatus(); rs.GetCode() != 0 {
		st := status.New(codes.Code(rs.GetCode()), rs.GetMessage())
		if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: "REQUESTED", Domain: "grpc.testing", Metadata: map[string]string{"code": codes.Code(rs.GetCode()).String()}}); err == nil {
			st = d
		}
		return nil, st.Err()
	}
	resp := &testpb.SimpleResponse{Payload: req.GetPayload(), Hostname: s.Hostname}
	if n := req.GetResponseSize(); n > 0 {
		resp.Payload = &testpb.Payload{Body: bytes.Repeat([]byte{'x'}, int(n))}
	}
	return resp, nil
}

// StreamingOutputCall sends one message per response parameter.
func (s *Server) StreamingOutputCall(req *testpb.StreamingOutputCallRequest, stream grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
	echoMetadata(stream.Context())
	for _, p := range req.GetResponseParameters() {
		if d := time.Duration(p.GetIntervalUs()) * time.Microsecond; d > 0 {
			select {
			case <-time.After(d):
			case <-stream.Context().Done():
				return stream.Context().Err()
			}
		}
		if err := stream.Send(&testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: bytes.Repeat([]byte{'x'}, int(p.GetSize()))}}); err != nil {
			return err
		}
	}
	if rs := req.GetResponseStatus(); rs.GetCode() != 0 {
		return status.Error(codes.Code(rs.GetCode()), rs.GetMessage())
	}
	return nil
}

func echoMetadata(ctx context.Context) {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("x-grpc-test-echo-initial"); len(v) > 0 {
		_ = grpc.SetHeader(ctx, metadata.Pairs("x-grpc-test-echo-initial", v[0]))
	}
	if v := md.Get("x-grpc-test-echo-trailing-bin"); len(v) > 0 {
		_ = grpc.SetTrailer(ctx, metadata.Pairs("x-grpc-test-echo-trailing-bin", v[0]))
	}
	if v := md.Get("x-request-id"); len(v) > 0 {
		_ = grpc.SetHeader(ctx, metadata.Pairs("x-request-id", v[0]))
	}
	if v := md.Get("traceparent"); len(v) > 0 {
		_ = grpc.SetHeader(ctx, metadata.Pairs("x-seen-traceparent", v[0]))
	}
}

// DescriptorSet is the test service's schema as a FileDescriptorSet,
// dependencies first — what `protoc --include_imports -o` would write for
// grpc/testing/test.proto, for `jetway schema put` — less the files named
// in without.
func DescriptorSet(without ...string) []byte {
	set := &descriptorpb.FileDescriptorSet{}
	seen := map[string]bool{}
	var add func(f protoreflect.FileDescriptor)
	add = func(f protoreflect.FileDescriptor) {
		if seen[f.Path()] {
			return
		}
		seen[f.Path()] = true
		for i := 0; i < f.Imports().Len(); i++ {
			add(f.Imports().Get(i).FileDescriptor)
		}
		if !slices.Contains(without, f.Path()) {
			set.File = append(set.File, protodesc.ToFileDescriptorProto(f))
		}
	}
	add(testpb.File_grpc_testing_test_proto)
	b, _ := proto.Marshal(set)
	return b
}
