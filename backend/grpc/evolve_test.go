package grpcbackend_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bufbuild/protocompile"
	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/reflection"
	v1reflection "google.golang.org/grpc/reflection/grpc_reflection_v1"
	v1alphareflection "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"

	grpcbackend "github.com/jetway-gw/jetway/backend/grpc"
	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/internal/jetwaytest"
)

// Two versions of one service: v2's Inner and Req have grown a field.
// Inner is only in a list and a map of Resp, so a v2 answer read with
// v1's schema has unknown fields below its top level only.
const (
	evoV1 = `syntax = "proto3"; package evo;
message Req { string name = 1; }
message Inner { string c = 1; }
message Resp { string a = 1; repeated Inner items = 2; map<string, Inner> by_name = 3; }
service Evo { rpc Get(Req) returns (Resp); rpc List(Req) returns (stream Resp); }`
	evoV2 = `syntax = "proto3"; package evo;
message Req { string name = 1; string tag = 2; }
message Inner { string c = 1; string d = 2; }
message Resp { string a = 1; repeated Inner items = 2; map<string, Inner> by_name = 3; }
service Evo { rpc Get(Req) returns (Resp); rpc List(Req) returns (stream Resp); }`
)

func compileProto(t *testing.T, src string) *protoregistry.Files {
	t.Helper()
	comp := protocompile.Compiler{Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
		Accessor: protocompile.SourceAccessorFromMap(map[string]string{"evo.proto": src}),
	})}
	files, err := comp.Compile(context.Background(), "evo.proto")
	if err != nil {
		t.Fatal(err)
	}
	reg := new(protoregistry.Files)
	if err := reg.RegisterFile(files[0]); err != nil {
		t.Fatal(err)
	}
	return reg
}

// evoServer serves evo.Evo with no generated code. What its reflection
// says (reflect) and what its answers are written with (answer) are set
// apart, so a test can have a server whose messages grew before or after
// its reflection did.
type evoServer struct {
	v1, v2          *protoregistry.Files
	reflect, answer atomic.Pointer[protoregistry.Files]
	reads           atomic.Int64 // reflection streams served
	mu              sync.Mutex
	methods         []string // the reflection methods called
}

// startEvo serves evo.Evo at v1, with the v1 reflection service, or only
// the v1alpha one.
func startEvo(t *testing.T, alphaOnly bool) (*evoServer, string) {
	t.Helper()
	e := &evoServer{v1: compileProto(t, evoV1), v2: compileProto(t, evoV2)}
	e.reflect.Store(e.v1)
	e.answer.Store(e.v1)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if strings.Contains(info.FullMethod, "ServerReflection") {
			e.reads.Add(1)
			e.mu.Lock()
			e.methods = append(e.methods, info.FullMethod)
			e.mu.Unlock()
		}
		return h(srv, ss)
	}))
	s.RegisterService(&grpc.ServiceDesc{
		ServiceName: "evo.Evo",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Get", Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			req := dynamicpb.NewMessage(e.desc("evo.Req"))
			if err := dec(req); err != nil {
				return nil, err
			}
			return e.resp(), nil
		}}},
		Streams: []grpc.StreamDesc{{StreamName: "List", ServerStreams: true, Handler: func(srv any, st grpc.ServerStream) error {
			req := dynamicpb.NewMessage(e.desc("evo.Req"))
			if err := st.RecvMsg(req); err != nil {
				return err
			}
			for range 3 {
				if err := st.SendMsg(e.resp()); err != nil {
					return err
				}
			}
			return nil
		}}},
		Metadata: "evo.proto",
	}, e)
	opts := reflection.ServerOptions{Services: s, DescriptorResolver: e}
	if alphaOnly {
		v1alphareflection.RegisterServerReflectionServer(s, reflection.NewServer(opts))
	} else {
		v1reflection.RegisterServerReflectionServer(s, reflection.NewServerV1(opts))
	}
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return e, l.Addr().String()
}

// The reflection service's descriptors are the reflect version's.
func (e *evoServer) FindFileByPath(p string) (protoreflect.FileDescriptor, error) {
	return e.reflect.Load().FindFileByPath(p)
}

func (e *evoServer) FindDescriptorByName(n protoreflect.FullName) (protoreflect.Descriptor, error) {
	return e.reflect.Load().FindDescriptorByName(n)
}

func (e *evoServer) desc(name protoreflect.FullName) protoreflect.MessageDescriptor {
	d, err := e.answer.Load().FindDescriptorByName(name)
	if err != nil {
		panic(err)
	}
	return d.(protoreflect.MessageDescriptor)
}

// resp is the answer in the answer version: every field it has, set.
func (e *evoServer) resp() *dynamicpb.Message {
	inner := func() protoreflect.Value {
		m := dynamicpb.NewMessage(e.desc("evo.Inner"))
		for _, f := range [][2]string{{"c", "c"}, {"d", "deep"}} {
			if fd := m.Descriptor().Fields().ByName(protoreflect.Name(f[0])); fd != nil {
				m.Set(fd, protoreflect.ValueOfString(f[1]))
			}
		}
		return protoreflect.ValueOfMessage(m)
	}
	r := dynamicpb.NewMessage(e.desc("evo.Resp"))
	fields := r.Descriptor().Fields()
	r.Set(fields.ByName("a"), protoreflect.ValueOfString("x"))
	r.Mutable(fields.ByName("items")).List().Append(inner())
	r.Mutable(fields.ByName("by_name")).Map().Set(protoreflect.ValueOfString("k").MapKey(), inner())
	return r
}

func (e *evoServer) reflectionMethods() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.methods...)
}

// askWorker sends a call to an API's workers as an edge that takes no
// stream would (an older edge, a cached call): one request, one reply.
func askWorker(t *testing.T, g *jetwaytest.Gateway, api, body string) *nats.Msg {
	t.Helper()
	h := nats.Header{"Content-Type": {"application/json"}}
	bus.EncodeRequest(h, &bus.Meta{Method: "POST", Path: "/" + api, RequestID: "direct-" + api,
		Deadline: time.Now().Add(2 * time.Second), Wire: bus.WireVersion})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	m, err := bus.Request(ctx, g.Conn, &nats.Msg{Subject: bus.APISubject("p", api), Header: h, Data: []byte(body)}, bus.WireVersion)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A backend whose answers carry fields the schema at hand does not declare
// (its messages grew; here only in messages nested in a list and a map)
// makes the worker read the schema again, on every path an answer takes:
// unary, a relayed stream (NDJSON, a JSON array) and a stream collected
// whole. The new fields then reach the JSON; once they do, the answers
// cause no more reads.
func TestUnknownResponseFieldsRefreshTheSchema(t *testing.T) {
	grpcbackend.SetRefreshMin(t, 200*time.Millisecond)
	g := jetwaytest.Start(t)
	e, addr := startEvo(t, false)
	paths := []struct{ api, method, accept string }{
		{"get", "evo.Evo/Get", ""},
		{"lines", "evo.Evo/List", "application/x-ndjson"},
		{"array", "evo.Evo/List", ""},
		{"whole", "evo.Evo/List", ""}, // asked on NATS with no stream
	}
	call := func(api, accept string) (int, string) {
		t.Helper()
		if api == "whole" {
			m := askWorker(t, g, api, `{}`)
			rep, err := bus.DecodeReply(m.Header)
			if err != nil {
				t.Fatal(err)
			}
			return rep.Status, string(m.Data)
		}
		r := g.Do("POST", "/"+api, strings.NewReader(`{}`), "Accept", accept)
		return r.Status, r.Body
	}
	for _, p := range paths {
		publishGRPC(g, p.api, "/"+p.api, addr, p.method, "")
		if status, body := call(p.api, p.accept); status != 200 || !strings.Contains(body, `"c":"c"`) || strings.Contains(body, "deep") {
			t.Fatalf("%s at v1: %d %s", p.api, status, body)
		}
	}
	before := e.reads.Load()
	if before == 0 {
		t.Fatal("no reflection read")
	}
	// The server's messages grow, and so does its reflection.
	e.reflect.Store(e.v2)
	e.answer.Store(e.v2)
	for _, p := range paths {
		natstest.CheckFor(t, 5*time.Second, 50*time.Millisecond, func() error {
			status, body := call(p.api, p.accept)
			if status != 200 {
				t.Fatalf("%s at v2: %d %s", p.api, status, body)
			}
			if strings.Count(body, `"d":"deep"`) < 2 { // in the list and in the map
				return fmt.Errorf("%s: the new field is not in %s", p.api, body)
			}
			return nil
		})
	}
	after := e.reads.Load()
	if after <= before {
		t.Fatalf("no reflection read after the answers grew (%d)", after)
	}
	// Answers the schema now declares are no reason to read it again (one
	// more read is allowed per API: a call that began on the old schema
	// may have finished after the new one was read).
	for range 20 {
		for _, p := range paths {
			if status, body := call(p.api, p.accept); status != 200 || !strings.Contains(body, "deep") {
				t.Fatalf("%s: %d %s", p.api, status, body)
			}
		}
	}
	time.Sleep(300 * time.Millisecond) // past refreshMin: a pending read would have started
	call("get", "")
	time.Sleep(100 * time.Millisecond)
	if extra := e.reads.Load() - after; extra > int64(len(paths)) {
		t.Fatalf("%d reflection reads after the schema caught up", extra)
	}
}

// A server whose answers always carry fields its own reflection does not
// declare cannot make the worker read its reflection once per call: the
// reads stay at one per refreshMin (here the default 10 s: none in the
// test's time).
func TestUnknownResponseFieldsDoNotAmplifyReflection(t *testing.T) {
	g := jetwaytest.Start(t)
	e, addr := startEvo(t, false)
	e.answer.Store(e.v2) // the reflection stays v1
	publishGRPC(g, "get", "/get", addr, "evo.Evo/Get", "")
	publishGRPC(g, "list", "/list", addr, "evo.Evo/List", "")
	for _, p := range []string{"/get", "/list"} {
		if r := g.Do("POST", p, strings.NewReader(`{}`)); r.Status != 200 || strings.Contains(r.Body, "deep") {
			t.Fatalf("%s: %d %s", p, r.Status, r.Body)
		}
	}
	first := e.reads.Load()
	for i := 0; i < 200; i++ {
		for _, p := range []string{"/get", "/list"} {
			if r := g.Do("POST", p, strings.NewReader(`{}`), "Accept", []string{"", "application/x-ndjson"}[i%2]); r.Status != 200 {
				t.Fatalf("%s: %d %s", p, r.Status, r.Body)
			}
		}
	}
	time.Sleep(100 * time.Millisecond)
	if extra := e.reads.Load() - first; extra > 1 {
		t.Fatalf("400 answers with unknown fields made %d more reflection reads", extra)
	}
}

// The schema is read again once it is refreshEvery old, with nothing
// saying it changed (no UNIMPLEMENTED, no unknown field either way): here
// the server's reflection grows a field its answers never set, which only
// emit_unpopulated shows.
func TestSchemaRefreshedOnItsTimer(t *testing.T) {
	grpcbackend.SetRefreshMin(t, 100*time.Millisecond)
	grpcbackend.SetRefreshEvery(t, 300*time.Millisecond)
	g := jetwaytest.Start(t)
	e, addr := startEvo(t, false)
	publishGRPC(g, "get", "/get", addr, "evo.Evo/Get", `,"json_options":{"emit_unpopulated":true}`)
	if r := g.Do("POST", "/get", strings.NewReader(`{}`)); r.Status != 200 || strings.Contains(r.Body, `"d"`) {
		t.Fatalf("at v1: %d %s", r.Status, r.Body)
	}
	first := e.reads.Load()
	e.reflect.Store(e.v2) // answers stay v1: nothing unknown in them
	natstest.CheckFor(t, 5*time.Second, 50*time.Millisecond, func() error {
		r := g.Do("POST", "/get", strings.NewReader(`{}`))
		if r.Status != 200 {
			t.Fatalf("%d %s", r.Status, r.Body)
		}
		if !strings.Contains(r.Body, `"d":""`) {
			return fmt.Errorf("the grown schema is not read yet: %s", r.Body)
		}
		return nil
	})
	if e.reads.Load() <= first {
		t.Fatal("no reflection read")
	}
}

// A server with only the older reflection service (v1alpha, as servers
// built before grpc-go 1.57 have) serves its schema all the same.
func TestSchemaFromV1alphaReflection(t *testing.T) {
	g := jetwaytest.Start(t)
	e, addr := startEvo(t, true)
	publishGRPC(g, "get", "/get", addr, "evo.Evo/Get", "")
	if r := g.Do("POST", "/get", strings.NewReader(`{}`)); r.Status != 200 || !strings.Contains(r.Body, `"a":"x"`) {
		t.Fatalf("v1alpha reflection only: %d %s", r.Status, r.Body)
	}
	methods := e.reflectionMethods()
	if len(methods) == 0 {
		t.Fatal("no reflection read")
	}
	for _, m := range methods {
		if !strings.HasPrefix(m, "/grpc.reflection.v1alpha.") {
			t.Fatalf("reflection method %s served by a server that has only v1alpha", m)
		}
	}
}

// A request naming a field the schema at hand lacks — in the body, or as a
// query parameter — is a 400, and makes the worker read the schema again:
// once the server's request message has grown the field, the same call
// goes through.
func TestUnknownRequestFieldRefreshesTheSchema(t *testing.T) {
	grpcbackend.SetRefreshMin(t, 200*time.Millisecond)
	g := jetwaytest.Start(t)
	e, addr := startEvo(t, false)
	publishGRPC(g, "body", "/body", addr, "evo.Evo/Get", "")
	publishGRPC(g, "query", "/query", addr, "evo.Evo/Get", "")
	calls := map[string]func() jetwaytest.Result{
		"body":  func() jetwaytest.Result { return g.Do("POST", "/body", strings.NewReader(`{"tag":"x"}`)) },
		"query": func() jetwaytest.Result { return g.Do("POST", "/query?tag=x", strings.NewReader(`{}`)) },
	}
	for name, call := range calls {
		if r := call(); r.Status != 400 || !strings.Contains(r.Body, "tag") {
			t.Fatalf("%s at v1: %d %s", name, r.Status, r.Body)
		}
	}
	e.reflect.Store(e.v2)
	e.answer.Store(e.v2)
	for name, call := range calls {
		natstest.CheckFor(t, 5*time.Second, 50*time.Millisecond, func() error {
			if r := call(); r.Status != 200 {
				return fmt.Errorf("%s at v2: %d %s", name, r.Status, r.Body)
			}
			return nil
		})
	}
}
