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
	"strings"

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

// AnyShared accepts every shared reference as the schema true: the check
// of an entry made without the registry at hand (its shared schemas are
// checked where they are stored, and by api put).
func AnyShared(string) ([]byte, bool) { return []byte("true"), true }

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
		if err != nil {
			for _, p := range compileProblems(err) {
				add(joinPath(part, p.Path), p.Message)
			}
			continue
		}
		s.parts[i] = sch
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

// sharedLoader resolves jetway:NAME references and refuses every other.
type sharedLoader SharedFunc

func (l sharedLoader) Load(u string) (any, error) {
	name, ok := strings.CutPrefix(u, SharedPrefix)
	if !ok {
		return nil, fmt.Errorf("reference %q: only %sNAME references (schemas shared in the registry) are allowed", u, SharedPrefix)
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
}

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
		err := sch.Validate(inst)
		if err == nil {
			continue
		}
		var ve *jsonschema.ValidationError
		if !errors.As(err, &ve) {
			add(RequestProblem{Pointer: "/" + part, Rule: "schema", Message: err.Error()})
			continue
		}
		var found []RequestProblem
		walkLeaves(ve, func(e *jsonschema.ValidationError) { found = append(found, leafProblems(part, e)...) })
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
	if ct := r.Header.Get("Content-Type"); !jsonMediaType(ct) {
		return nil, &RequestProblem{Pointer: "/headers/content-type", Rule: "content-type",
			Message: fmt.Sprintf("must be application/json (or a +json type) for a body this api validates, not %q", ct)}
	}
	v, err := decodeStrict(r.Body)
	if err != nil {
		return nil, &RequestProblem{Pointer: "/body", Rule: "json", Message: "not valid JSON: " + err.Error()}
	}
	return v, nil
}

// jsonMediaType reports whether a Content-Type is JSON.
func jsonMediaType(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "application/json" || (strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))
}

// decodeStrict parses a JSON body as the validator wants it (numbers kept
// exact) and refuses what parsers disagree on: an object with a key twice
// (one parser takes the first, another the last: the backend could read a
// value the schema never saw) and anything after the value.
func decodeStrict(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	v, err := decodeValue(d)
	if err != nil {
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errors.New("more data after the JSON value")
	}
	return v, nil
}

func decodeValue(d *json.Decoder) (any, error) {
	t, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch t := t.(type) {
	case json.Delim:
		switch t {
		case '{':
			m := map[string]any{}
			for d.More() {
				kt, err := d.Token()
				if err != nil {
					return nil, err
				}
				k := kt.(string) // the decoder only gives string keys
				if _, dup := m[k]; dup {
					return nil, fmt.Errorf("key %q appears twice in one object", k)
				}
				if m[k], err = decodeValue(d); err != nil {
					return nil, err
				}
			}
			_, err := d.Token() // '}'
			return m, err
		case '[':
			a := []any{}
			for d.More() {
				v, err := decodeValue(d)
				if err != nil {
					return nil, err
				}
				a = append(a, v)
			}
			_, err := d.Token() // ']'
			return a, err
		}
		return nil, fmt.Errorf("unexpected %v", t)
	default:
		return t, nil // string, json.Number, bool or nil
	}
}

// leafProblems turns one failed keyword into problems: one per missing or
// unexpected property, else one at the value.
func leafProblems(part string, e *jsonschema.ValidationError) []RequestProblem {
	at := pointer(part, e.InstanceLocation)
	msg := e.ErrorKind.LocalizedString(printer)
	rule := "false"
	if kp := e.ErrorKind.KeywordPath(); len(kp) > 0 {
		rule = kp[len(kp)-1]
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

func pointer(part string, loc []string) string {
	var b strings.Builder
	b.WriteString("/" + part)
	for _, t := range loc {
		b.WriteByte('/')
		b.WriteString(escapePointer(t))
	}
	return b.String()
}

func escapePointer(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}
