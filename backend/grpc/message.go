package grpcbackend

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	// The google.rpc error details (ErrorInfo, BadRequest, RetryInfo, ...)
	// are linked in so a status's details come out as JSON, not bytes.
	_ "google.golang.org/genproto/googleapis/rpc/errdetails"
)

// badRequest is a request that does not fit the method's input message;
// its text names the field. unknown: it names a field the message does not
// have (which the backend's schema may have grown since it was read).
type badRequest struct {
	msg     string
	unknown bool
}

func (e *badRequest) Error() string { return e.msg }

func badf(format string, args ...any) error { return &badRequest{msg: fmt.Sprintf(format, args...)} }

// badField is badf for an error about one field: unknown when err says
// the message has no such field (protojson's "unknown field", or
// setField's unknownField).
func badField(err error, format string, args ...any) error {
	_, unknown := err.(unknownField)
	unknown = unknown || strings.Contains(err.Error(), "unknown field")
	return &badRequest{msg: fmt.Sprintf(format, args...), unknown: unknown}
}

// requestMessage builds the input message of m: the JSON body, then the
// route parameters and the query parameters as fields over it (a dotted
// name reaches a nested field, a repeated field takes every value). A
// parameter replaces what the body gave its field, zero values and lists
// included: the path is what the route matched, so it wins. Parsing and
// type checks are protojson's: the parameters are written as a JSON
// object, read into a message of their own, and their fields copied over.
func requestMessage(m *method, body []byte, params, query url.Values, allowUnknownQuery bool) (*dynamicpb.Message, error) {
	in := dynamicpb.NewMessage(m.desc.Input())
	un := protojson.UnmarshalOptions{Resolver: resolver{m.types}}
	if len(body) > 0 {
		if err := un.Unmarshal(body, in); err != nil {
			return nil, badField(err, "the body does not fit %s: %s", m.desc.Input().FullName(), protoErr(err))
		}
	}
	fields := map[string]any{}
	var paths []fieldPath
	for name, vs := range params {
		if name == "*" {
			continue
		}
		p, err := setField(fields, m.desc.Input(), name, vs)
		if err != nil {
			return nil, badField(err, "route parameter %s: %v", name, err)
		}
		paths = append(paths, p)
	}
	for name, vs := range query {
		p, err := setField(fields, m.desc.Input(), name, vs)
		if err != nil {
			if _, unknown := err.(unknownField); unknown && allowUnknownQuery {
				continue
			}
			return nil, badField(err, "query parameter %s: %v", name, err)
		}
		paths = append(paths, p)
	}
	if len(paths) == 0 {
		return in, nil
	}
	b, err := json.Marshal(fields)
	if err != nil {
		return nil, badf("parameters: %v", err)
	}
	over := dynamicpb.NewMessage(m.desc.Input())
	if err := un.Unmarshal(b, over); err != nil {
		return nil, badField(err, "the parameters do not fit %s: %s", m.desc.Input().FullName(), protoErr(err))
	}
	for _, p := range paths {
		p.copy(in, over)
	}
	return in, nil
}

// fieldPath is the fields from the input message down to one parameter's.
type fieldPath []protoreflect.FieldDescriptor

// copy sets the parameter's field of dst to its value in src, which has
// the parameters only: a zero value clears the body's, a list replaces it.
func (p fieldPath) copy(dst, src protoreflect.Message) {
	last := len(p) - 1
	for _, fd := range p[:last] {
		src = src.Get(fd).Message()
		dst = dst.Mutable(fd).Message()
	}
	if src.Has(p[last]) {
		dst.Set(p[last], src.Get(p[last]))
	} else {
		dst.Clear(p[last])
	}
}

// protoErr is protojson's message without its "proto: " prefix.
func protoErr(err error) string {
	s := err.Error()
	s = strings.TrimPrefix(s, "proto:")
	s = strings.TrimPrefix(s, "\u00a0") // protojson varies its spacing on purpose
	return strings.TrimSpace(s)
}

type unknownField string

func (u unknownField) Error() string { return string(u) }

// setField puts values at the dotted path name of message md in the JSON
// object obj: a JSON literal where protojson wants one (booleans, enum
// numbers), a string everywhere else (protojson reads numbers from
// strings).
func setField(obj map[string]any, md protoreflect.MessageDescriptor, name string, vs []string) (fieldPath, error) {
	parts := strings.Split(name, ".")
	path := make(fieldPath, 0, len(parts))
	for i, p := range parts {
		fd := md.Fields().ByJSONName(p)
		if fd == nil {
			fd = md.Fields().ByName(protoreflect.Name(p))
		}
		if fd == nil {
			return nil, unknownField(fmt.Sprintf("%s has no field %q", md.FullName(), p))
		}
		key := string(fd.Name())
		path = append(path, fd)
		if i < len(parts)-1 {
			if fd.Kind() != protoreflect.MessageKind || fd.IsList() || fd.IsMap() {
				return nil, fmt.Errorf("field %s is not a message", fd.Name())
			}
			next, ok := obj[key].(map[string]any)
			if !ok {
				if obj[key] != nil {
					return nil, fmt.Errorf("field %s is given twice", fd.Name())
				}
				next = map[string]any{}
				obj[key] = next
			}
			obj, md = next, fd.Message()
			continue
		}
		if fd.IsMap() || (fd.Kind() == protoreflect.MessageKind && !wellKnownScalar(fd.Message())) {
			return nil, fmt.Errorf("field %s is a %s; give it in the body", fd.Name(), kindName(fd))
		}
		if obj[key] != nil {
			return nil, fmt.Errorf("field %s is given twice", fd.Name())
		}
		lits := make([]any, 0, len(vs))
		for _, v := range vs {
			lit, err := literal(fd, v)
			if err != nil {
				return nil, err
			}
			lits = append(lits, lit)
		}
		switch {
		case fd.IsList():
			obj[key] = lits
		case len(lits) == 1:
			obj[key] = lits[0]
		default:
			return nil, fmt.Errorf("field %s takes one value (got %d)", fd.Name(), len(lits))
		}
	}
	return path, nil
}

func literal(fd protoreflect.FieldDescriptor, v string) (any, error) {
	kind := fd.Kind()
	if kind == protoreflect.MessageKind && fd.Message().FullName() == "google.protobuf.BoolValue" {
		kind = protoreflect.BoolKind // a wrapper's JSON is its value's
	}
	switch kind {
	case protoreflect.BoolKind:
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("field %s wants true or false (got %q)", fd.Name(), v)
		}
		return b, nil
	case protoreflect.EnumKind:
		if n, err := strconv.ParseInt(v, 10, 32); err == nil {
			return n, nil
		}
	}
	return v, nil
}

// wellKnownScalar reports the message types whose JSON form is a string
// (Timestamp, Duration, FieldMask) or a scalar (the wrappers).
func wellKnownScalar(md protoreflect.MessageDescriptor) bool {
	switch md.FullName() {
	case "google.protobuf.Timestamp", "google.protobuf.Duration", "google.protobuf.FieldMask",
		"google.protobuf.StringValue", "google.protobuf.BytesValue", "google.protobuf.BoolValue",
		"google.protobuf.Int32Value", "google.protobuf.Int64Value", "google.protobuf.UInt32Value",
		"google.protobuf.UInt64Value", "google.protobuf.FloatValue", "google.protobuf.DoubleValue":
		return true
	}
	return false
}

func kindName(fd protoreflect.FieldDescriptor) string {
	if fd.IsMap() {
		return "map"
	}
	return "message"
}

// httpStatus is the HTTP status of a gRPC status code: the table Envoy's
// transcoder and grpc-gateway share.
func httpStatus(c codes.Code) int {
	switch c {
	case codes.OK:
		return http.StatusOK
	case codes.Canceled:
		return 499 // client closed request
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
		return http.StatusBadRequest
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	case codes.NotFound:
		return http.StatusNotFound
	case codes.AlreadyExists, codes.Aborted:
		return http.StatusConflict
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.Unimplemented:
		return http.StatusNotImplemented
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError // Unknown, Internal, DataLoss, and codes beyond the table
}

// statusJSON is a status as the JSON of google.rpc.Status, its details
// decoded with the method's types and those linked in; a detail of a type
// neither knows keeps its type URL and its bytes in base64.
func statusJSON(st *status.Status, m *method) []byte {
	var types resolver
	if m != nil {
		types.local = m.types
	}
	b, err := protojson.MarshalOptions{Resolver: types}.Marshal(st.Proto())
	if err == nil {
		return b
	}
	type rawAny struct {
		Type  string `json:"@type"`
		Value string `json:"value"`
	}
	out := struct {
		Code    codes.Code `json:"code"`
		Message string     `json:"message"`
		Details []rawAny   `json:"details"`
	}{Code: st.Code(), Message: st.Message(), Details: []rawAny{}}
	for _, d := range st.Proto().GetDetails() {
		out.Details = append(out.Details, rawAny{d.GetTypeUrl(), base64.StdEncoding.EncodeToString(d.GetValue())})
	}
	b, _ = json.Marshal(out)
	return b
}

// int64sAsNumbers rewrites protojson's output of a message of type md with
// its 64-bit integers as JSON numbers instead of strings (json_options
// int64_as_numbers, for callers that want numbers and hold them exactly).
// protojson writes the JSON; this only unquotes the values of 64-bit
// integer fields, found by the descriptor, in messages, lists, maps and
// the Int64Value/UInt64Value wrappers. Keys come out sorted.
func int64sAsNumbers(b []byte, md protoreflect.MessageDescriptor) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return json.Marshal(unquoteMessage(v, md))
}

func unquoteMessage(v any, md protoreflect.MessageDescriptor) any {
	switch md.FullName() {
	case "google.protobuf.Int64Value", "google.protobuf.UInt64Value":
		return unquote(v)
	}
	obj, ok := v.(map[string]any)
	if !ok || wellKnownScalar(md) {
		return v
	}
	for k, fv := range obj {
		fd := md.Fields().ByJSONName(k)
		if fd == nil {
			fd = md.Fields().ByName(protoreflect.Name(k))
		}
		if fd == nil {
			continue // "@type" of an Any, an extension
		}
		obj[k] = unquoteField(fv, fd)
	}
	return obj
}

func unquoteField(v any, fd protoreflect.FieldDescriptor) any {
	switch {
	case fd.IsMap():
		if m, ok := v.(map[string]any); ok {
			for k, mv := range m {
				m[k] = unquoteValue(mv, fd.MapValue())
			}
		}
		return v
	case fd.IsList():
		if l, ok := v.([]any); ok {
			for i, lv := range l {
				l[i] = unquoteValue(lv, fd)
			}
		}
		return v
	}
	return unquoteValue(v, fd)
}

func unquoteValue(v any, fd protoreflect.FieldDescriptor) any {
	switch fd.Kind() {
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
		protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return unquote(v)
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return unquoteMessage(v, fd.Message())
	}
	return v
}

// unquote turns "123" into the number 123.
func unquote(v any) any {
	if s, ok := v.(string); ok {
		if _, err := strconv.ParseInt(s, 10, 64); err == nil {
			return json.Number(s)
		}
		if _, err := strconv.ParseUint(s, 10, 64); err == nil {
			return json.Number(s)
		}
	}
	return v
}
