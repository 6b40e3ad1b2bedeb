// Package grpcbackend is the adapter of backends of type grpc: it calls one
// method of a gRPC server with no code generated for it. The method's
// message types come from the server's reflection service (v1, else
// v1alpha), read on the first call and kept; the caller's JSON body, route
// parameters and query become the request message (protojson), and the
// response message goes back as JSON.
//
// A gRPC status other than OK becomes the HTTP status of the table Envoy's
// transcoder and grpc-gateway share, with the google.rpc.Status as the JSON
// body, details decoded. UNAVAILABLE and RESOURCE_EXHAUSTED count as
// failures for the API's breaker and retries. The deadline travels as
// grpc-timeout; the request id, the trace context and the entry's metadata
// headers travel as metadata; the response's metadata and trailers come
// back as Grpc-Metadata-* and Grpc-Trailer-* headers (base64 for -bin).
//
// A server-streaming method's messages are relayed to the edge as they
// come, flow-controlled (workers/stream.go), when the edge takes a stream:
// as newline-delimited JSON (Accept: application/x-ndjson), server-sent
// events (Accept: text/event-stream) or the elements of a JSON array (any
// other Accept; the edge writes the brackets and commas). A request that
// takes no stream (a cached call, an older edge) gets the array whole once
// the stream ends, within the max payload. All within the deadline.
//
// A response message with fields the schema does not declare (the
// server's messages have grown) marks the schema for a refresh, as
// UNIMPLEMENTED does.
package grpcbackend

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"golang.org/x/net/http/httpguts"

	"github.com/jetway-gw/jetway/backend"
	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/registry"
)

// Adapter builds the instances of grpc backends. It keeps one client
// connection per target and TLS setting, shared by every API that calls
// it and kept across registry changes; the last instance to go closes it.
type Adapter struct {
	maxResp int
	load    SchemaLoader // nil: pinned schemas cannot be read

	mu    sync.Mutex // guards conns; taken at Build and Close only
	conns map[string]*sharedConn
}

type sharedConn struct {
	cc   *grpc.ClientConn
	refs int
}

// maxMetadata bounds the header and trailer metadata of one response.
const maxMetadata = 64 << 10

// New returns the adapter; a response larger than maxResponse bytes is
// refused (the bus's max payload less room for headers), and load reads
// the schemas entries pin (backend.schema) from the registry.
func New(maxResponse int, load SchemaLoader) *Adapter {
	return &Adapter{maxResp: maxResponse, load: load, conns: map[string]*sharedConn{}}
}

// Build takes (or opens) the connection to the target. It does not wait
// for it: gRPC connects in the background and the first call reads the
// method's schema, so a backend that is down delays no registry change.
func (a *Adapter) Build(spec *registry.Backend, o backend.BuildOptions) (backend.Instance, error) {
	key, creds, err := a.credentials(spec)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	sc := a.conns[key]
	if sc == nil {
		// dns:/// always: a target is host:port, never a scheme such as
		// unix: that a bare target could be read as.
		cc, err := grpc.NewClient("dns:///"+spec.Target,
			grpc.WithTransportCredentials(creds),
			grpc.WithUserAgent("jetway"),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(a.maxResp)),
			// Retries belong to the API's pipeline, within its budget.
			grpc.WithDisableRetry(),
			// Fixed windows turn off gRPC's bandwidth-delay pings; a
			// gateway's calls are small and many.
			grpc.WithInitialWindowSize(1<<20),
			grpc.WithInitialConnWindowSize(16<<20),
			// A backend's metadata is bounded like its body (gRPC's
			// default would take 16 MiB of headers per call).
			grpc.WithMaxHeaderListSize(maxMetadata))
		if err != nil {
			a.mu.Unlock()
			return nil, fmt.Errorf("grpc target %s: %w", spec.Target, err)
		}
		sc = &sharedConn{cc: cc}
		a.conns[key] = sc
	}
	sc.refs++
	a.mu.Unlock()
	in := &instance{
		a: a, key: key, cc: sc.cc,
		target: spec.Target, service: spec.Method[:strings.IndexByte(spec.Method, '/')],
		method:     spec.Method[strings.IndexByte(spec.Method, '/')+1:],
		schema:     newSchema(sc.cc, spec.Method, spec.Schema, a.load),
		allowQuery: spec.AllowUnknownQuery,
		maxResp:    a.maxResp,
		log:        o.Logger,
		tracer:     o.Tracer,
	}
	for _, h := range spec.Metadata {
		in.metadata = append(in.metadata, textproto.CanonicalMIMEHeaderKey(h))
	}
	if j := spec.JSONOptions; j != nil {
		in.out = protojson.MarshalOptions{UseEnumNumbers: j.EnumsAsNumbers, EmitUnpopulated: j.EmitUnpopulated, UseProtoNames: j.ProtoNames}
		in.int64Numbers = j.Int64AsNumbers
	}
	return in, nil
}

// credentials are the transport credentials of spec and the key of the
// connection they make with its target.
func (a *Adapter) credentials(spec *registry.Backend) (string, credentials.TransportCredentials, error) {
	if spec.TLS == nil {
		return "plain " + spec.Target, insecure.NewCredentials(), nil
	}
	cfg, err := backend.ClientTLS(spec.TLS)
	if err != nil {
		return "", nil, err
	}
	t := spec.TLS
	return strings.Join([]string{"tls", spec.Target, t.CA, t.Cert, t.Key, t.ServerName}, "\x00"), credentials.NewTLS(cfg), nil
}

func (a *Adapter) release(key string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	sc := a.conns[key]
	if sc == nil {
		return nil
	}
	if sc.refs--; sc.refs > 0 {
		return nil
	}
	delete(a.conns, key)
	return sc.cc.Close()
}

// instance calls one method.
type instance struct {
	a      *Adapter
	key    string
	cc     *grpc.ClientConn
	schema *schema

	target, service, method string
	metadata                []string // canonical header names sent as metadata
	allowQuery              bool
	out                     protojson.MarshalOptions
	int64Numbers            bool
	maxResp                 int
	log                     *slog.Logger
	tracer                  backend.Tracer
	closeOnce               sync.Once
}

// Close gives the connection back; the last instance on it closes it.
func (in *instance) Close() error {
	var err error
	in.closeOnce.Do(func() {
		in.schema.close()
		err = in.a.release(in.key)
	})
	return err
}

// Call writes the request message, calls the method within ctx's deadline
// and writes its answer as JSON.
func (in *instance) Call(ctx context.Context, req *backend.Request) (*backend.Response, error) {
	m, err := in.schema.get(ctx)
	if err != nil {
		return in.schemaError(ctx, err)
	}
	if m.desc.IsStreamingClient() {
		return statusResponse(status.New(codes.Unimplemented, "client-streaming methods are not served over HTTP by Jetway"), m), nil
	}
	query, err := url.ParseQuery(req.RawQuery)
	if err != nil {
		return nil, bus.Errorf(bus.CodeBadRequest, "the query string does not parse: "+err.Error())
	}
	msg, err := requestMessage(m, req.Body, req.Params(), query, in.allowQuery)
	if err != nil {
		var bad *badRequest
		if errors.As(err, &bad) && bad.unknown {
			in.schema.invalidate() // the backend's schema may have grown the field (read again at most every refreshMin)
		}
		return nil, bus.Errorf(bus.CodeBadRequest, err.Error())
	}
	md, err := in.outgoing(req)
	if err != nil {
		return nil, bus.Errorf(bus.CodeBadRequest, err.Error())
	}
	host, err := req.RewrittenHost()
	if err != nil {
		return nil, err
	}
	var opts []grpc.CallOption
	if host != "" {
		opts = []grpc.CallOption{grpc.CallAuthority(host)} // :authority; the connection stays the target's
	}
	var span backend.Span
	if in.tracer != nil {
		h := http.Header{}
		_, span = in.tracer.StartRPC(ctx, "grpc", in.service, in.method, in.target, h)
		for k, vs := range h {
			md[strings.ToLower(k)] = vs
		}
	}
	ctx = metadata.NewOutgoingContext(ctx, md)
	var resp *backend.Response
	if m.desc.IsStreamingServer() && req.Stream > 0 {
		resp, err = in.relay(ctx, m, msg, streamFormFor(req.Header.Get("Accept")).relay(), opts)
	} else if m.desc.IsStreamingServer() {
		resp, err = in.stream(ctx, m, msg, req.Header.Get("Accept"), opts)
	} else {
		resp, err = in.unary(ctx, m, msg, opts)
	}
	if span == nil {
		return resp, err
	}
	if err == nil && resp.Stream != nil {
		// A relayed stream's client span ends with the stream.
		status := resp.Status
		resp.AfterStream(func(serr error) {
			code := int(codes.OK)
			var se *backend.StreamError
			switch {
			case errors.As(serr, &se):
				code = se.RPCCode
			case serr != nil:
				code = int(codes.Canceled) // the caller went away, or the deadline
				if errors.Is(serr, context.DeadlineExceeded) {
					code = int(codes.DeadlineExceeded)
				}
			}
			span.RPCCode(code)
			span.Finish(status, serr)
		})
		return resp, nil
	}
	if err == nil {
		span.RPCCode(resp.RPCCode)
	} else if be, ok := err.(*bus.Error); ok && be.Code == bus.CodeGatewayTimeout {
		span.RPCCode(int(codes.DeadlineExceeded))
	}
	backend.Finish(span, resp, err)
	return resp, err
}

// marshal writes a response message as the entry's JSON options say.
func (in *instance) marshal(m *method, msg *dynamicpb.Message) ([]byte, error) {
	opts := in.out
	opts.Resolver = resolver{m.types}
	b, err := opts.Marshal(msg)
	if err == nil && in.int64Numbers {
		b, err = int64sAsNumbers(b, m.desc.Output())
	}
	if err != nil {
		return nil, bus.Errorf(bus.CodeBadGateway, "the backend's answer could not be written as JSON: "+err.Error())
	}
	return b, nil
}

// noteUnknown marks the schema for a refresh when a response message has
// fields the schema does not declare, at any depth: the server's messages
// have grown, and protojson drops what it cannot name until the schema is
// read again. Like every invalidation it costs at most one reflection read
// per refreshMin, however many answers carry such fields. A pinned schema
// is never read again, so it is not looked at. It reports whether it
// found any.
func (in *instance) noteUnknown(out *dynamicpb.Message) bool {
	if in.schema.digest != "" || !hasUnknown(out) {
		return false
	}
	in.schema.invalidate()
	return true
}

// hasUnknown reports whether m, or a message in its fields, lists or map
// values, holds unknown fields. It walks the message-typed fields by the
// descriptor (no closure per message: it runs on every answer).
func hasUnknown(m protoreflect.Message) bool {
	if len(m.GetUnknown()) > 0 {
		return true
	}
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		switch {
		case fd.Message() == nil || !m.Has(fd):
		case fd.IsMap():
			if fd.MapValue().Message() == nil {
				continue
			}
			found := false
			m.Get(fd).Map().Range(func(_ protoreflect.MapKey, v protoreflect.Value) bool {
				found = hasUnknown(v.Message())
				return !found
			})
			if found {
				return true
			}
		case fd.IsList():
			l := m.Get(fd).List()
			for j := 0; j < l.Len(); j++ {
				if hasUnknown(l.Get(j).Message()) {
					return true
				}
			}
		default:
			if hasUnknown(m.Get(fd).Message()) {
				return true
			}
		}
	}
	return false
}

func (in *instance) unary(ctx context.Context, m *method, msg *dynamicpb.Message, opts []grpc.CallOption) (*backend.Response, error) {
	out := dynamicpb.NewMessage(m.desc.Output())
	var header, trailer metadata.MD
	err := in.cc.Invoke(ctx, m.path, msg, out, append(opts, grpc.Header(&header), grpc.Trailer(&trailer))...)
	if err != nil {
		return in.callError(ctx, err, m, header, trailer)
	}
	in.noteUnknown(out)
	body, err := in.marshal(m, out)
	if err != nil {
		return nil, err
	}
	if len(body) > in.maxResp {
		return nil, bus.Errorf(bus.CodeBadGateway, fmt.Sprintf("backend response exceeds the %d byte limit", in.maxResp))
	}
	h := responseHeader(header, trailer)
	h.Set("Content-Type", "application/json")
	return &backend.Response{Status: http.StatusOK, Header: h, Body: body}, nil
}

// stream reads a server stream to its end and writes its messages in the
// form the caller accepts.
func (in *instance) stream(ctx context.Context, m *method, msg *dynamicpb.Message, accept string, opts []grpc.CallOption) (*backend.Response, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // a stream left early is ended, not leaked
	st, err := in.cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, m.path, opts...)
	if err == nil {
		err = st.SendMsg(msg)
	}
	if err == nil {
		err = st.CloseSend()
	}
	if err != nil {
		return in.callError(ctx, err, m, nil, nil)
	}
	form := streamFormFor(accept)
	var body []byte
	n := 0
	unknown := false
	for {
		out := dynamicpb.NewMessage(m.desc.Output())
		err = st.RecvMsg(out)
		if errors.Is(err, io.EOF) {
			err = nil
			break
		}
		if err != nil {
			break
		}
		if !unknown {
			unknown = in.noteUnknown(out)
		}
		b, merr := in.marshal(m, out)
		if merr != nil {
			return nil, merr
		}
		body = form.item(body, n, b)
		n++
		if len(body) > in.maxResp {
			return nil, bus.Errorf(bus.CodeBadGateway, fmt.Sprintf("backend stream exceeds the %d byte limit", in.maxResp))
		}
	}
	header, _ := st.Header()
	if err != nil {
		if n == 0 {
			return in.callError(ctx, err, m, header, st.Trailer())
		}
		// The deadline, seen here or first by the server (which got it
		// as grpc-timeout and ended the stream).
		if ctx.Err() != nil || status.Code(err) == codes.DeadlineExceeded {
			return nil, bus.Errorf(bus.CodeGatewayTimeout, "backend stream did not end within the deadline")
		}
		body = form.fail(body, n, statusJSON(status.Convert(err), m))
	}
	body = form.end(body, n)
	h := responseHeader(header, st.Trailer())
	h.Set("Content-Type", form.contentType)
	return &backend.Response{Status: http.StatusOK, Header: h, Body: body}, nil
}

// relay starts a server stream whose messages go to the caller one by one
// (NDJSON lines, SSE events, JSON array elements) as the edge takes them.
// What fails before the first message is an answer with its own status;
// after it, the status is the stream's last chunk. The stream lives until
// its Stream func returns (or the call's context ends).
func (in *instance) relay(ctx context.Context, m *method, msg *dynamicpb.Message, form streamForm, opts []grpc.CallOption) (*backend.Response, error) {
	sctx, cancel := context.WithCancel(ctx)
	st, err := in.cc.NewStream(sctx, &grpc.StreamDesc{ServerStreams: true}, m.path, opts...)
	if err == nil {
		err = st.SendMsg(msg)
	}
	if err == nil {
		err = st.CloseSend()
	}
	first := dynamicpb.NewMessage(m.desc.Output())
	if err == nil {
		err = st.RecvMsg(first)
	}
	if err != nil && !errors.Is(err, io.EOF) {
		defer cancel()
		return in.callError(ctx, err, m, nil, nil)
	}
	header, _ := st.Header()
	h := responseHeader(header, nil)
	h.Set("Content-Type", form.contentType)
	if errors.Is(err, io.EOF) { // an empty stream
		cancel()
		if form.framed {
			// A stream of no elements, which the edge writes as [];
			// one reply would read as a unary method's answer there.
			return &backend.Response{Status: http.StatusOK, Header: h, Stream: func(func([]byte) error) error { return nil }}, nil
		}
		return &backend.Response{Status: http.StatusOK, Header: h}, nil
	}
	stream := func(send func([]byte) error) error {
		defer cancel()
		out := first
		unknown := false
		for i := 0; ; i++ {
			if !unknown {
				unknown = in.noteUnknown(out)
			}
			b, err := in.marshal(m, out)
			if err != nil {
				return err
			}
			if err := send(form.item(nil, i, b)); err != nil {
				return err
			}
			out = dynamicpb.NewMessage(m.desc.Output())
			if err := st.RecvMsg(out); err != nil {
				if errors.Is(err, io.EOF) {
					return nil
				}
				if errors.Is(ctx.Err(), context.Canceled) {
					// The caller went away (the worker cancelled the
					// call) while the backend was quiet: not a deadline,
					// and nothing the breaker should count.
					return context.Canceled
				}
				if ctx.Err() != nil || status.Code(err) == codes.DeadlineExceeded {
					return context.DeadlineExceeded // the edge says so to the caller
				}
				st := status.Convert(err)
				if err := send(form.fail(nil, i+1, statusJSON(st, m))); err != nil {
					return err
				}
				return &backend.StreamError{Status: httpStatus(st.Code()), Message: st.Message(), RPCCode: int(st.Code())}
			}
		}
	}
	return &backend.Response{Status: http.StatusOK, Header: h, Stream: stream}, nil
}

// callError turns a failed call into the caller's answer: the deadline
// passing is the gateway's 504, any other status the backend's own answer.
func (in *instance) callError(ctx context.Context, err error, m *method, header, trailer metadata.MD) (*backend.Response, error) {
	if deadlinePassed(ctx) {
		return nil, bus.Errorf(bus.CodeGatewayTimeout, "backend did not answer within the deadline")
	}
	st := status.Convert(err)
	switch st.Code() {
	case codes.Unimplemented:
		in.schema.invalidate() // the method may have moved: read the schema again (not a pinned one)
	case codes.ResourceExhausted:
		if strings.Contains(st.Message(), "larger than max") { // our own receive limit
			return nil, bus.Errorf(bus.CodeBadGateway, fmt.Sprintf("backend response exceeds the %d byte limit", in.maxResp))
		}
	}
	resp := statusResponse(st, m)
	for k, vs := range responseHeader(header, trailer) {
		resp.Header[k] = vs
	}
	return resp, nil
}

// schemaError is the answer when the method's schema is not at hand.
func (in *instance) schemaError(ctx context.Context, err error) (*backend.Response, error) {
	var nm *errNoMethod
	switch {
	case errors.As(err, &nm):
		return statusResponse(status.New(codes.Unimplemented, nm.msg), nil), nil
	case ctx.Err() != nil:
		return nil, bus.Errorf(bus.CodeGatewayTimeout, "the backend's schema could not be read within the deadline")
	}
	in.log.Warn("grpc backend schema", "target", in.target, "service", in.service, "schema", in.schema.digest, "err", err)
	if in.schema.digest != "" {
		return nil, bus.Errorf(bus.CodeBadGateway, "the schema "+in.schema.digest+" of "+in.service+" could not be read from the registry")
	}
	return nil, bus.Errorf(bus.CodeBadGateway, "the schema of "+in.service+" could not be read from "+in.target+" (is server reflection on?)")
}

// deadlinePassed reports whether the call's deadline has passed, by its
// context or by the clock: the server's copy of the deadline (grpc-timeout)
// may end the call a moment before the context's timer fires, and gRPC
// then reports DEADLINE_EXCEEDED as if the server had answered it.
func deadlinePassed(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

// statusResponse is a non-OK status as the caller's answer.
func statusResponse(st *status.Status, m *method) *backend.Response {
	code := httpStatus(st.Code())
	h := http.Header{"Content-Type": {"application/json"}}
	return &backend.Response{
		Status: code, Header: h, Body: statusJSON(st, m),
		// The backend saying it is overloaded fails the call for the
		// breaker and retries, though 429 is below 500.
		Failed:  st.Code() == codes.ResourceExhausted,
		RPCCode: int(st.Code()),
	}
}

// outgoing is the call's metadata: the entry's metadata headers, the
// request id and the trace context. A -bin header's value is base64, as
// in gRPC's HTTP mapping.
func (in *instance) outgoing(req *backend.Request) (metadata.MD, error) {
	md := make(metadata.MD, len(in.metadata)+3)
	for _, h := range in.metadata {
		vs := req.Header[h]
		if len(vs) == 0 {
			continue
		}
		key := strings.ToLower(h)
		if !strings.HasSuffix(key, "-bin") {
			for _, v := range vs {
				if !printableASCII(v) {
					return nil, fmt.Errorf("header %s: gRPC metadata takes printable ASCII only (send binary values base64 in a -bin header)", h)
				}
			}
		} else {
			dec := make([]string, len(vs))
			for i, v := range vs {
				b, err := decodeBase64(v)
				if err != nil {
					return nil, fmt.Errorf("header %s must be base64: %v", h, err)
				}
				dec[i] = string(b)
			}
			vs = dec
		}
		md[key] = vs
	}
	if req.RequestID != "" {
		md["x-request-id"] = []string{req.RequestID}
	}
	// The caller's trace context always travels, whether or not this
	// worker traces (a tracing one puts its client span's in its place).
	for _, h := range [...]string{"Traceparent", "Tracestate"} {
		if v := req.Header.Get(h); v != "" && len(v) <= maxTraceHeader && printableASCII(v) {
			md[strings.ToLower(h)] = []string{v}
		}
	}
	return md, nil
}

// maxTraceHeader bounds a trace header passed on (W3C: traceparent is 55
// characters, tracestate at most 32 members of 256).
const maxTraceHeader = 8192

func printableASCII(v string) bool {
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			return false
		}
	}
	return true
}

func decodeBase64(v string) ([]byte, error) {
	if b, err := base64.StdEncoding.DecodeString(v); err == nil {
		return b, nil
	}
	return base64.RawStdEncoding.DecodeString(v)
}

// responseHeader maps a call's response metadata and trailers to HTTP
// headers, as grpc-gateway does.
func responseHeader(header, trailer metadata.MD) http.Header {
	h := make(http.Header, len(header)+len(trailer)+1)
	add := func(prefix string, md metadata.MD) {
		for k, vs := range md {
			// gRPC's own keys (grpc-status, grpc-status-details-bin) are
			// in the body already.
			if k == "content-type" || strings.HasPrefix(k, ":") || strings.HasPrefix(k, "grpc-") {
				continue
			}
			name := prefix + textproto.CanonicalMIMEHeaderKey(k)
			for _, v := range vs {
				if strings.HasSuffix(k, "-bin") {
					v = base64.StdEncoding.EncodeToString([]byte(v))
				} else if !httpguts.ValidHeaderFieldValue(v) {
					continue
				}
				h[name] = append(h[name], v)
			}
		}
	}
	add("Grpc-Metadata-", header)
	add("Grpc-Trailer-", trailer)
	return h
}

// streamForm writes the messages of a server stream.
type streamForm struct {
	contentType string
	relayed     bool // each message can go out on its own (not a JSON array)
	// framed: the chunks are a JSON array's elements, which the edge
	// frames with [ , ] (the array form relayed).
	framed bool
	item   func(body []byte, i int, msg []byte) []byte
	fail   func(body []byte, n int, status []byte) []byte
	end    func(body []byte, n int) []byte
}

// relay is the form's chunks as a relayed stream sends them: NDJSON lines
// and SSE events as they are; a JSON array's elements bare (the message,
// or {"error": status} for a failure after messages), which the edge
// writes between "[", "," and "]" — as it writes its own last element
// when it cuts the stream.
func (f streamForm) relay() streamForm {
	if f.relayed {
		return f
	}
	return streamForm{
		contentType: f.contentType, relayed: true, framed: true,
		item: func(b []byte, _ int, m []byte) []byte { return append(b, m...) },
		fail: func(b []byte, _ int, s []byte) []byte {
			return append(append(append(b, `{"error":`...), s...), '}')
		},
		end: func(b []byte, _ int) []byte { return b },
	}
}

func streamFormFor(accept string) streamForm {
	switch {
	case strings.Contains(accept, "application/x-ndjson"):
		return streamForm{
			contentType: "application/x-ndjson", relayed: true,
			item: func(b []byte, _ int, m []byte) []byte { return append(append(b, m...), '\n') },
			fail: func(b []byte, _ int, s []byte) []byte {
				return append(append(append(b, `{"error":`...), s...), "}\n"...)
			},
			end: func(b []byte, _ int) []byte { return b },
		}
	case strings.Contains(accept, "text/event-stream"):
		return streamForm{
			contentType: "text/event-stream", relayed: true,
			item: func(b []byte, i int, m []byte) []byte {
				b = append(b, "id: "...)
				b = strconv.AppendInt(b, int64(i), 10)
				return append(append(append(b, "\ndata: "...), m...), "\n\n"...)
			},
			fail: func(b []byte, _ int, s []byte) []byte {
				return append(append(append(b, "event: error\ndata: "...), s...), "\n\n"...)
			},
			end: func(b []byte, _ int) []byte { return b },
		}
	}
	return streamForm{
		contentType: "application/json",
		item: func(b []byte, i int, m []byte) []byte {
			if i == 0 {
				b = append(b, '[')
			} else {
				b = append(b, ',')
			}
			return append(b, m...)
		},
		fail: func(b []byte, _ int, s []byte) []byte {
			return append(append(append(b, `,{"error":`...), s...), '}')
		},
		end: func(b []byte, n int) []byte {
			if n == 0 {
				return append(b, "[]"...)
			}
			return append(b, ']')
		},
	}
}
