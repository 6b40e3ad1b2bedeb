package otel

import (
	"math"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// This file writes an OTLP ExportTraceServiceRequest (opentelemetry-proto,
// collector/trace/v1) straight from the SDK's spans into one reused byte
// buffer. The OTLP exporter of the SDK first copies every span, attribute
// and value into generated protobuf structs and then marshals those by
// reflection: about 6 kB of garbage and a third of tracing's CPU per call
// through Jetway. The wire format is small and stable; the field numbers
// below are those of trace.proto, common.proto and resource.proto, and
// TestEncodeMatchesProto decodes the output with the generated types.

const (
	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2
	wireFixed32 = 5
)

func appendVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func varintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

func appendTag(b []byte, field, wire int) []byte {
	return appendVarint(b, uint64(field)<<3|uint64(wire))
}

func appendString(b []byte, field int, s string) []byte {
	b = appendTag(b, field, wireBytes)
	b = appendVarint(b, uint64(len(s)))
	return append(b, s...)
}

// appendStringOpt writes s unless it is empty (proto3: absent = "").
func appendStringOpt(b []byte, field int, s string) []byte {
	if s == "" {
		return b
	}
	return appendString(b, field, s)
}

func appendBytes(b []byte, field int, p []byte) []byte {
	b = appendTag(b, field, wireBytes)
	b = appendVarint(b, uint64(len(p)))
	return append(b, p...)
}

func appendUvarintOpt(b []byte, field int, v uint64) []byte {
	if v == 0 {
		return b
	}
	return appendVarint(appendTag(b, field, wireVarint), v)
}

func appendFixed64(b []byte, field int, v uint64) []byte {
	b = appendTag(b, field, wireFixed64)
	return append(b, byte(v), byte(v>>8), byte(v>>16), byte(v>>24), byte(v>>32), byte(v>>40), byte(v>>48), byte(v>>56))
}

func appendFixed32(b []byte, field int, v uint32) []byte {
	b = appendTag(b, field, wireFixed32)
	return append(b, byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
}

// beginMsg starts an embedded message: it writes the tag and one byte for
// the body's length, and returns where that byte is; endMsg then writes
// the length there, moving the body when it needs more bytes (bodies of
// 128 bytes or more: spans, and the batch's containers). Most messages,
// attributes and their values, are shorter and move nothing.
func beginMsg(b []byte, field int) ([]byte, int) {
	b = appendTag(b, field, wireBytes)
	return append(b, 0), len(b)
}

var zeros [10]byte

func endMsg(b []byte, at int) []byte {
	n := len(b) - at - 1
	if n < 0x80 {
		b[at] = byte(n)
		return b
	}
	k := varintLen(uint64(n))
	b = append(b, zeros[:k-1]...)
	copy(b[at+k:], b[at+1:at+1+n])
	v := uint64(n)
	for i := at; ; i++ {
		if v < 0x80 {
			b[i] = byte(v)
			break
		}
		b[i] = byte(v) | 0x80
		v >>= 7
	}
	return b
}

func unixNano(t time.Time) uint64 {
	return uint64(max(0, t.UnixNano()))
}

func clampUint32(n int) uint64 {
	if n < 0 {
		return 0
	}
	return uint64(min(n, math.MaxUint32))
}

// appendKeyValues writes attrs as repeated KeyValue (key 1, value 2).
func appendKeyValues(b []byte, field int, attrs []attribute.KeyValue) []byte {
	for _, kv := range attrs {
		var at int
		b, at = beginMsg(b, field)
		b = appendString(b, 1, string(kv.Key))
		b = appendAnyValue(b, 2, kv.Value)
		b = endMsg(b, at)
	}
	return b
}

// appendAnyValue writes v as an AnyValue: string 1, bool 2, int 3,
// double 4, array 5 (ArrayValue.values 1), kvlist 6 (KeyValueList.values
// 1), bytes 7. A oneof member is written even when it is the zero value.
func appendAnyValue(b []byte, field int, v attribute.Value) []byte {
	b, at := beginMsg(b, field)
	switch v.Type() {
	case attribute.BOOL:
		b = appendTag(b, 2, wireVarint)
		if v.AsBool() {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
	case attribute.INT64:
		b = appendVarint(appendTag(b, 3, wireVarint), uint64(v.AsInt64()))
	case attribute.FLOAT64:
		b = appendFixed64(b, 4, math.Float64bits(v.AsFloat64()))
	case attribute.STRING:
		b = appendString(b, 1, v.AsString())
	case attribute.BYTESLICE:
		b = appendBytes(b, 7, v.AsByteSlice())
	case attribute.BOOLSLICE:
		b = appendArray(b, len(v.AsBoolSlice()), func(b []byte, i int) []byte { return appendAnyValue(b, 1, attribute.BoolValue(v.AsBoolSlice()[i])) })
	case attribute.INT64SLICE:
		s := v.AsInt64Slice()
		b = appendArray(b, len(s), func(b []byte, i int) []byte { return appendAnyValue(b, 1, attribute.Int64Value(s[i])) })
	case attribute.FLOAT64SLICE:
		s := v.AsFloat64Slice()
		b = appendArray(b, len(s), func(b []byte, i int) []byte { return appendAnyValue(b, 1, attribute.Float64Value(s[i])) })
	case attribute.STRINGSLICE:
		s := v.AsStringSlice()
		b = appendArray(b, len(s), func(b []byte, i int) []byte { return appendAnyValue(b, 1, attribute.StringValue(s[i])) })
	case attribute.SLICE:
		s := v.AsSlice()
		b = appendArray(b, len(s), func(b []byte, i int) []byte { return appendAnyValue(b, 1, s[i]) })
	case attribute.MAP:
		var in int
		b, in = beginMsg(b, 6)
		b = appendKeyValues(b, 1, v.AsMap())
		b = endMsg(b, in)
	}
	return endMsg(b, at)
}

// appendArray writes an ArrayValue (field 5 of AnyValue) of n values.
func appendArray(b []byte, n int, value func([]byte, int) []byte) []byte {
	b, at := beginMsg(b, 5)
	for i := range n {
		b = value(b, i)
	}
	return endMsg(b, at)
}

// spanFlags is the W3C trace flags plus "we know whether the parent is
// remote", and whether it is (SpanFlags in trace.proto).
func spanFlags(tf trace.TraceFlags, parent trace.SpanContext) uint32 {
	f := uint32(tf) | 0x100
	if parent.IsRemote() {
		f |= 0x200
	}
	return f
}

// appendSpan writes one Span.
func appendSpan(b []byte, field int, s sdktrace.ReadOnlySpan) []byte {
	b, at := beginMsg(b, field)
	sc := s.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	b = appendBytes(b, 1, tid[:])
	b = appendBytes(b, 2, sid[:])
	if ts := sc.TraceState(); ts.Len() > 0 {
		b = appendString(b, 3, ts.String())
	}
	parent := s.Parent()
	if psid := parent.SpanID(); psid.IsValid() {
		b = appendBytes(b, 4, psid[:])
	}
	b = appendString(b, 5, s.Name())
	b = appendUvarintOpt(b, 6, uint64(trace.ValidateSpanKind(s.SpanKind())))
	b = appendFixed64(b, 7, unixNano(s.StartTime()))
	b = appendFixed64(b, 8, unixNano(s.EndTime()))
	b = appendKeyValues(b, 9, s.Attributes())
	b = appendUvarintOpt(b, 10, clampUint32(s.DroppedAttributes()))
	for _, e := range s.Events() {
		var ea int
		b, ea = beginMsg(b, 11)
		b = appendFixed64(b, 1, unixNano(e.Time))
		b = appendString(b, 2, e.Name)
		b = appendKeyValues(b, 3, e.Attributes)
		b = appendUvarintOpt(b, 4, clampUint32(e.DroppedAttributeCount))
		b = endMsg(b, ea)
	}
	b = appendUvarintOpt(b, 12, clampUint32(s.DroppedEvents()))
	for _, l := range s.Links() {
		var la int
		b, la = beginMsg(b, 13)
		ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		b = appendBytes(b, 1, ltid[:])
		b = appendBytes(b, 2, lsid[:])
		if ts := l.SpanContext.TraceState(); ts.Len() > 0 {
			b = appendString(b, 3, ts.String())
		}
		b = appendKeyValues(b, 4, l.Attributes)
		b = appendUvarintOpt(b, 5, clampUint32(l.DroppedAttributeCount))
		b = appendFixed32(b, 6, spanFlags(l.SpanContext.TraceFlags(), l.SpanContext))
		b = endMsg(b, la)
	}
	b = appendUvarintOpt(b, 14, clampUint32(s.DroppedLinks()))
	if st := s.Status(); st.Code != codes.Unset || st.Description != "" {
		var sa int
		b, sa = beginMsg(b, 15)
		b = appendStringOpt(b, 2, st.Description)
		var code uint64 // STATUS_CODE_UNSET
		switch st.Code {
		case codes.Ok:
			code = 1
		case codes.Error:
			code = 2
		}
		b = appendUvarintOpt(b, 3, code)
		b = endMsg(b, sa)
	}
	b = appendFixed32(b, 16, spanFlags(sc.TraceFlags(), parent))
	return endMsg(b, at)
}

// appendScope writes an InstrumentationScope.
func appendScope(b []byte, field int, is instrumentation.Scope) []byte {
	b, at := beginMsg(b, field)
	b = appendStringOpt(b, 1, is.Name)
	b = appendStringOpt(b, 2, is.Version)
	b = appendKeyValues(b, 3, is.Attributes.ToSlice())
	return endMsg(b, at)
}

// appendRequest writes an ExportTraceServiceRequest of spans: one
// ResourceSpans per resource and in it one ScopeSpans per scope, in the
// order they first appear. A provider has one resource, and Jetway two
// tracers, so the grouping is a short linear scan.
func appendRequest(b []byte, spans []sdktrace.ReadOnlySpan) []byte {
	type group struct {
		res   *resource.Resource
		scope instrumentation.Scope
	}
	var seen [8]group
	groups := seen[:0]
	of := make([]uint16, len(spans)) // each span's group
	for i, s := range spans {
		res, scope := s.Resource(), s.InstrumentationScope()
		gi := -1
		for j := range groups {
			if groups[j].res == res && scopeEqual(groups[j].scope, scope) {
				gi = j
				break
			}
		}
		if gi < 0 {
			if len(groups) == 1<<16-1 {
				gi = 0 // absurd; keep the encoding valid, if mislabelled
			} else {
				gi = len(groups)
				groups = append(groups, group{res, scope})
			}
		}
		of[i] = uint16(gi)
	}
	for i, g := range groups {
		if slices.ContainsFunc(groups[:i], func(h group) bool { return h.res == g.res }) {
			continue // written with the first scope of this resource
		}
		var ra int
		b, ra = beginMsg(b, 1) // resource_spans
		if g.res != nil {
			var rr int
			b, rr = beginMsg(b, 1) // resource
			b = appendKeyValues(b, 1, g.res.Attributes())
			b = endMsg(b, rr)
		}
		for j := i; j < len(groups); j++ {
			h := groups[j]
			if h.res != g.res {
				continue
			}
			var sa int
			b, sa = beginMsg(b, 2) // scope_spans
			b = appendScope(b, 1, h.scope)
			for k, s := range spans {
				if int(of[k]) == j {
					b = appendSpan(b, 2, s)
				}
			}
			b = appendStringOpt(b, 3, h.scope.SchemaURL)
			b = endMsg(b, sa)
		}
		if g.res != nil {
			b = appendStringOpt(b, 3, g.res.SchemaURL())
		}
		b = endMsg(b, ra)
	}
	return b
}

func scopeEqual(a, b instrumentation.Scope) bool {
	return a.Name == b.Name && a.Version == b.Version && a.SchemaURL == b.SchemaURL && a.Attributes.Equals(&b.Attributes)
}
