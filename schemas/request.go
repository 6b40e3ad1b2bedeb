package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

// The parts of a request an API entry's "validate" block can check. A
// problem's pointer starts with the part: /body/amount, /query/limit,
// /headers/x-tenant, /params/id.
const (
	PartBody    = "body"
	PartHeaders = "headers"
	PartQuery   = "query"
	PartParams  = "params"
)

// RequestParts lists the parts in the order their problems are listed.
var RequestParts = [...]string{PartParams, PartQuery, PartHeaders, PartBody}

// SharedPrefix starts a reference to a schema shared in the registry:
// {"$ref": "jetway:orders.item"}. No other reference leaves an entry's own
// schemas: an entry can never make the edge read a file or a URL.
const SharedPrefix = "jetway:"

// MaxRequestProblems bounds the problems one refusal lists.
const MaxRequestProblems = 100

// RequestProblem is one reason a request does not match its API's schemas.
type RequestProblem struct {
	// Pointer is a JSON pointer into {"body":…,"headers":…,"query":…,
	// "params":…}: the field at fault (for a missing one, where it belongs).
	Pointer string `json:"pointer"`
	// Rule is the schema keyword that failed ("required", "minimum",
	// "type", …), or what made the part unreadable ("json",
	// "content-type").
	Rule string `json:"rule"`
	// Message is the entry's own message for the field when it gives one,
	// else the validator's.
	Message string `json:"message"`
}

// RequestSchema checks the parts of a request an entry's validate block
// names. Compiled once per registry change; safe for concurrent use.
type RequestSchema struct {
	parts    [len(RequestParts)]*jsonschema.Schema // by RequestParts index; nil: not checked
	quick    [len(RequestParts)]*quickNode         // their quick checks (quick.go); nil: none
	messages map[string]string                     // the entry's messages, by pointer
}

// Checks reports whether the schema checks part.
func (s *RequestSchema) Checks(part string) bool {
	i := partIndex(part)
	return s != nil && i >= 0 && s.parts[i] != nil
}

func partIndex(part string) int {
	for i, p := range RequestParts {
		if p == part {
			return i
		}
	}
	return -1
}

// SharedFunc returns the JSON of a shared schema by name; false when
// there is none.
type SharedFunc func(name string) ([]byte, bool)

// AnyShared is the SharedFunc of a check made without the registry at
// hand: every shared reference is taken on trust (a fragment of one too).
// Its shared schemas are checked where they are stored, and by api put
// against those stored.
var AnyShared SharedFunc

// CompileRequest compiles the schemas of a validate block (JSON Schema
// 2020-12, formats asserted) by part, with the entry's messages by pointer.
// Problems name the part ("body: …"); none means it compiled.
func CompileRequest(parts map[string]json.RawMessage, messages map[string]string, shared SharedFunc) (*RequestSchema, []Problem) {
	var problems []Problem
	add := func(path, msg string) { problems = append(problems, Problem{Path: path, Message: msg}) }
	s := &RequestSchema{messages: messages}
	for i, part := range RequestParts {
		doc, ok := parts[part]
		if !ok || doc == nil {
			continue
		}
		sch, err := compilePart(part, doc, shared)
		if err != nil && shared == nil && trustedRef(err) {
			continue // compiled for its other problems only
		}
		if err != nil {
			for _, p := range compileProblems(err) {
				add(joinPath(part, p.Path), p.Message)
			}
			continue
		}
		s.parts[i], s.quick[i] = sch, quickOf(sch)
	}
	for ptr := range messages {
		part, _, _ := strings.Cut(strings.TrimPrefix(ptr, "/"), "/")
		if !strings.HasPrefix(ptr, "/") || partIndex(part) < 0 {
			add("messages."+ptr, "must be a JSON pointer into a part: /body/…, /query/…, /headers/… or /params/…")
		}
	}
	sort.SliceStable(problems, func(i, j int) bool { return problems[i].Path < problems[j].Path })
	return s, problems
}

func joinPath(a, b string) string {
	if b == "" {
		return a
	}
	return a + "." + b
}

// partURL is where a part's schema sits for the compiler: references
// inside it resolve against it, and nothing is ever fetched from it.
func partURL(part string) string { return "urn:jetway:validate:" + part }

func compilePart(part string, doc []byte, shared SharedFunc) (*jsonschema.Schema, error) {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return nil, fmt.Errorf("not valid JSON: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(sharedLoader(shared))
	if err := c.AddResource(partURL(part), v); err != nil {
		return nil, err
	}
	return c.Compile(partURL(part))
}

// trustedRef reports whether a compile failed only on a fragment of a
// shared schema taken on trust (AnyShared stands in the schema true).
func trustedRef(err error) bool {
	var pe *jsonschema.JSONPointerNotFoundError
	return errors.As(err, &pe) && strings.HasPrefix(pe.URL, SharedPrefix)
}

// sharedLoader resolves jetway:NAME references and refuses every other.
type sharedLoader SharedFunc

func (l sharedLoader) Load(u string) (any, error) {
	name, ok := strings.CutPrefix(u, SharedPrefix)
	if !ok {
		return nil, fmt.Errorf("reference %q: only %sNAME references (schemas shared in the registry) are allowed", u, SharedPrefix)
	}
	if l == nil {
		return true, nil // AnyShared
	}
	doc, found := l(name)
	if !found {
		return nil, fmt.Errorf("no shared schema %q (jetway jsonschema put %s FILE)", name, name)
	}
	return jsonschema.UnmarshalJSON(bytes.NewReader(doc))
}

// compileProblems lists why a schema did not compile: each metaschema
// violation at its place in the schema, else the compiler's error.
func compileProblems(err error) []Problem {
	var se *jsonschema.SchemaValidationError
	var ve *jsonschema.ValidationError
	if errors.As(err, &se) && errors.As(se.Err, &ve) {
		var out []Problem
		walkLeaves(ve, func(e *jsonschema.ValidationError) {
			out = append(out, Problem{Path: strings.Join(e.InstanceLocation, "."), Message: "schema is invalid: " + e.ErrorKind.LocalizedString(printer)})
		})
		return out
	}
	return []Problem{{Message: err.Error()}}
}

func walkLeaves(e *jsonschema.ValidationError, f func(*jsonschema.ValidationError)) {
	if len(e.Causes) == 0 {
		f(e)
		return
	}
	for _, c := range e.Causes {
		walkLeaves(c, f)
	}
}

// Request is what a request shows its schemas.
type Request struct {
	Header   http.Header
	RawQuery string
	Params   func(yield func(name, value string) bool) // the route's parameters
	Body     []byte
	// Decoded is set by Validate to the body as it parsed it (DecodeJSON's
	// form), when it did: a body rewrite after it need not parse again.
	Decoded any
}

// DecodeJSON parses a JSON body the way validation does (decodeStrict):
// one reading only, numbers exact (int64 or json.Number), bounded depth.
func DecodeJSON(b []byte) (any, error) { return decodeStrict(b) }

// IsJSON reports whether a Content-Type is JSON (application/json or a
// +json type) in UTF-8.
func IsJSON(contentType string) bool { return jsonMediaType(contentType) }

// Validate checks a request and returns its problems (at most
// MaxRequestProblems, then the count of the others); none means it passes.
// Only the parts the schema checks are read.
func (s *RequestSchema) Validate(r *Request) (problems []RequestProblem, more int) {
	add := func(p RequestProblem) {
		if m, ok := s.messages[p.Pointer]; ok {
			p.Message = m
		}
		if len(problems) < MaxRequestProblems {
			problems = append(problems, p)
		} else {
			more++
		}
	}
	for i, part := range RequestParts {
		sch := s.parts[i]
		if sch == nil {
			continue
		}
		inst, bad := instance(part, r)
		if bad != nil {
			add(*bad)
			continue
		}
		if q := s.quick[i]; q != nil && q.check(inst, len(r.Body)+len(r.RawQuery)+256) {
			continue
		}
		err := sch.Validate(inst)
		if err == nil {
			continue
		}
		var ve *jsonschema.ValidationError
		if !errors.As(err, &ve) {
			add(RequestProblem{Pointer: "/" + part, Rule: "schema", Message: err.Error()})
			continue
		}
		// Only the problems that will be listed are formatted: a body of
		// a million wrong items costs its count, not a million messages.
		var found []RequestProblem
		room := MaxRequestProblems - len(problems)
		walkLeaves(ve, func(e *jsonschema.ValidationError) {
			if len(found) < room {
				found = append(found, leafProblems(part, e)...)
			} else {
				more += leafCount(e)
			}
		})
		sort.SliceStable(found, func(i, j int) bool { return found[i].Pointer < found[j].Pointer })
		for _, p := range found {
			add(p)
		}
	}
	return problems, more
}

// instance is the JSON value a part's schema checks: the body as parsed;
// headers (lower-case names, repeated values joined with ", "), query
// parameters (a string, or an array of strings when repeated) and route
// parameters as objects of strings. A part that cannot be read is a
// problem of its own.
func instance(part string, r *Request) (any, *RequestProblem) {
	switch part {
	case PartHeaders:
		m := make(map[string]any, len(r.Header))
		for k, vs := range r.Header {
			m[strings.ToLower(k)] = strings.Join(vs, ", ")
		}
		return m, nil
	case PartQuery:
		q, err := url.ParseQuery(r.RawQuery)
		if err != nil {
			return nil, &RequestProblem{Pointer: "/query", Rule: "query", Message: "not a valid query string: " + err.Error()}
		}
		m := make(map[string]any, len(q))
		for k, vs := range q {
			if len(vs) == 1 {
				m[k] = vs[0]
				continue
			}
			a := make([]any, len(vs))
			for i, v := range vs {
				a[i] = v
			}
			m[k] = a
		}
		return m, nil
	case PartParams:
		m := map[string]any{}
		if r.Params != nil {
			for k, v := range r.Params {
				m[k] = v
			}
		}
		return m, nil
	}
	if len(r.Body) == 0 {
		return nil, &RequestProblem{Pointer: "/body", Rule: "required", Message: "a JSON body is required"}
	}
	if cts := r.Header["Content-Type"]; len(cts) != 1 || !jsonMediaType(cts[0]) {
		return nil, &RequestProblem{Pointer: "/headers/content-type", Rule: "content-type",
			Message: fmt.Sprintf("must be one application/json (or a +json type), in UTF-8, for a body this api validates, not %q", strings.Join(cts, ", "))}
	}
	v, err := decodeStrict(r.Body)
	if err != nil {
		return nil, &RequestProblem{Pointer: "/body", Rule: "json", Message: "not valid JSON: " + err.Error()}
	}
	r.Decoded = v
	return v, nil
}

// jsonMediaType reports whether a Content-Type is JSON.
func jsonMediaType(ct string) bool {
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return false // the schema would see other characters than the backend
	}
	return mt == "application/json" || (strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))
}

// decodeStrict parses a JSON body as the validator wants it (numbers kept
// exact) and refuses what parsers disagree on, so that the schema and the
// backend always read the same value:
//   - an object with a key twice, also under case folding (one parser
//     takes the first, another the last; Go's encoding/json matches keys
//     case-insensitively, so "AMOUNT" fills the field of "amount");
//   - invalid UTF-8 (jsontext refuses it; a lenient parser would replace
//     it), and anything after the value.
//
// It also refuses what would make the check itself costly: nesting deeper
// than maxDepth, and a number longer than maxNumber characters or with an
// exponent beyond ±maxExponent (the validator reads every number exactly,
// and 1e1000000 costs it tens of milliseconds).
func decodeStrict(b []byte) (any, error) {
	d := jsontext.NewDecoder(bytes.NewReader(b))
	v, err := decodeValue(d, 0)
	if err != nil {
		return nil, err
	}
	if _, err := d.ReadToken(); err != io.EOF {
		return nil, errors.New("more data after the JSON value")
	}
	return v, nil
}

// Bounds of a body the validator checks.
const (
	maxDepth    = 128
	maxNumber   = 100
	maxExponent = 400
)

func decodeValue(d *jsontext.Decoder, depth int) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("nested deeper than %d levels", maxDepth)
	}
	t, err := d.ReadToken()
	if err != nil {
		return nil, err
	}
	switch t.Kind() {
	case '{':
		m := map[string]any{}
		var folded map[string]bool // the keys, case-folded, once a key is not plain lower-case ASCII
		for d.PeekKind() != '}' {
			kt, err := d.ReadToken()
			if err != nil {
				return nil, err
			}
			k := kt.String()
			if folded == nil && !lowerASCII(k) {
				folded = make(map[string]bool, len(m)+1)
				for prev := range m {
					folded[foldKey(prev)] = true
				}
			}
			if folded != nil {
				fk := foldKey(k)
				if folded[fk] {
					return nil, fmt.Errorf("key %q appears twice in one object (keys are compared ignoring case)", k)
				}
				folded[fk] = true
			}
			if m[k], err = decodeValue(d, depth+1); err != nil {
				return nil, err
			}
		}
		_, err := d.ReadToken()
		return m, err
	case '[':
		a := []any{}
		for d.PeekKind() != ']' {
			v, err := decodeValue(d, depth+1)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		_, err := d.ReadToken()
		return a, err
	case '"':
		return t.String(), nil
	case '0':
		n := t.String()
		if len(n) > maxNumber {
			return nil, fmt.Errorf("number of %d characters: at most %d", len(n), maxNumber)
		}
		if e := strings.IndexAny(n, "eE"); e >= 0 {
			if x, err := strconv.Atoi(strings.TrimPrefix(n[e+1:], "+")); err != nil || x > maxExponent || x < -maxExponent {
				return nil, fmt.Errorf("number %s: exponent beyond ±%d", n, maxExponent)
			}
		}
		// A backend that reads numbers as float64 (most do) must read
		// this one on the same side of the schema's bounds: refuse one
		// it cannot hold at all (1e400: infinite) or reads as zero
		// (1e-400).
		if f, err := strconv.ParseFloat(n, 64); err != nil || (f == 0 && strings.ContainsAny(mantissa(n), "123456789")) {
			return nil, fmt.Errorf("number %s is beyond what a float64 holds", n)
		}
		// An integer that fits goes as int64: the validator formats and
		// parses every number it checks, and an int64 takes it a fraction
		// of a json.Number's time. Any other number stays exact.
		if isPlainInt(n) {
			if i, err := strconv.ParseInt(n, 10, 64); err == nil {
				return i, nil
			}
		}
		return json.Number(n), nil
	case 't':
		return true, nil
	case 'f':
		return false, nil
	case 'n':
		return nil, nil
	}
	return nil, fmt.Errorf("unexpected token %v", t)
}

// lowerASCII reports whether a key is plain lower-case ASCII, which no
// other key equals under case folding but itself (the common case: no
// folding needed until a key is not).
func lowerASCII(k string) bool {
	for i := 0; i < len(k); i++ {
		if c := k[i]; c >= utf8.RuneSelf || ('A' <= c && c <= 'Z') {
			return false
		}
	}
	return true
}

// foldKey maps a key to one representative of its case-folding class:
// two keys are equal under strings.EqualFold exactly when their foldKeys
// are equal (each rune becomes the smallest rune of its unicode.SimpleFold
// orbit, so "ſ", "s" and "S", or "K" and "k", fold together).
func foldKey(k string) string {
	var b strings.Builder
	for _, r := range k {
		m := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			m = min(m, f)
		}
		b.WriteRune(m)
	}
	return b.String()
}

// mantissa is a JSON number without its exponent.
func mantissa(n string) string {
	if e := strings.IndexAny(n, "eE"); e >= 0 {
		return n[:e]
	}
	return n
}

// isPlainInt reports whether a JSON number is written as an integer (no
// fraction, no exponent).
func isPlainInt(n string) bool {
	return !strings.ContainsAny(n, ".eE")
}

// leafProblems turns one failed keyword into problems: one per missing or
// unexpected property, else one at the value.
func leafProblems(part string, e *jsonschema.ValidationError) []RequestProblem {
	at := pointer(part, e.InstanceLocation)
	msg := e.ErrorKind.LocalizedString(printer)
	rule := "false"
	if kp := e.ErrorKind.KeywordPath(); len(kp) > 0 {
		rule = kp[0] // the keyword; dependentRequired's path goes on with the property
	}
	switch k := e.ErrorKind.(type) {
	case *kind.Required:
		out := make([]RequestProblem, len(k.Missing))
		for i, name := range k.Missing {
			out[i] = RequestProblem{Pointer: at + "/" + escapePointer(name), Rule: rule, Message: "is required"}
		}
		return out
	case *kind.AdditionalProperties:
		out := make([]RequestProblem, len(k.Properties))
		for i, name := range k.Properties {
			out[i] = RequestProblem{Pointer: at + "/" + escapePointer(name), Rule: rule, Message: "is not allowed"}
		}
		return out
	}
	return []RequestProblem{{Pointer: at, Rule: rule, Message: msg}}
}

// leafCount is how many problems leafProblems would make of e.
func leafCount(e *jsonschema.ValidationError) int {
	switch k := e.ErrorKind.(type) {
	case *kind.Required:
		return len(k.Missing)
	case *kind.AdditionalProperties:
		return len(k.Properties)
	}
	return 1
}

func pointer(part string, loc []string) string {
	var b strings.Builder
	b.WriteString("/" + part)
	for _, t := range loc {
		b.WriteByte('/')
		b.WriteString(escapePointer(t))
	}
	return b.String()
}

var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

func escapePointer(s string) string {
	return pointerEscaper.Replace(s)
}
