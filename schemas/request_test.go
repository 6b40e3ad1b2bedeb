package schemas_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/jetway-gw/jetway/schemas"
)

func compile(t *testing.T, parts map[string]string, messages map[string]string, shared schemas.SharedFunc) *schemas.RequestSchema {
	t.Helper()
	raw := map[string]json.RawMessage{}
	for k, v := range parts {
		raw[k] = json.RawMessage(v)
	}
	s, problems := schemas.CompileRequest(raw, messages, shared)
	if len(problems) > 0 {
		t.Fatalf("compile: %v", problems)
	}
	return s
}

func jsonReq(body string) *schemas.Request {
	return &schemas.Request{Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(body)}
}

// Every problem of a request is listed, each with its pointer, rule and
// the entry's own message where it gives one.
func TestValidateListsEveryProblem(t *testing.T) {
	s := compile(t, map[string]string{
		"body": `{"type":"object","required":["amount","currency"],"additionalProperties":false,
			"properties":{"amount":{"type":"integer","minimum":1},"currency":{"enum":["EUR","USD"]},"note":{"type":"string","maxLength":4}}}`,
		"query": `{"type":"object","properties":{"limit":{"type":"string","pattern":"^[0-9]+$"}}}`,
	}, map[string]string{"/body/amount": "amount must be a whole number of cents, at least 1"}, nil)
	req := jsonReq(`{"amount":0,"note":"too long","extra":true}`)
	req.RawQuery = "limit=ten"
	got, more := s.Validate(req)
	want := []schemas.RequestProblem{
		{Pointer: "/query/limit", Rule: "pattern"},
		{Pointer: "/body/amount", Rule: "minimum", Message: "amount must be a whole number of cents, at least 1"},
		{Pointer: "/body/currency", Rule: "required", Message: "is required"},
		{Pointer: "/body/extra", Rule: "additionalProperties", Message: "is not allowed"},
		{Pointer: "/body/note", Rule: "maxLength"},
	}
	if more != 0 || len(got) != len(want) {
		t.Fatalf("got %d (+%d) problems, want %d: %+v", len(got), more, len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if g.Pointer != w.Pointer || g.Rule != w.Rule || (w.Message != "" && g.Message != w.Message) || g.Message == "" {
			t.Errorf("problem %d = %+v, want %+v", i, g, w)
		}
	}
	if got, _ := s.Validate(jsonReq(`{"amount":5,"currency":"EUR"}`)); len(got) != 0 {
		t.Fatalf("a good request: %+v", got)
	}
}

// A body parsers could read two ways is refused: a key twice (the schema
// would see one value and the backend maybe the other), trailing data.
func TestValidateRefusesAmbiguousBodies(t *testing.T) {
	s := compile(t, map[string]string{"body": `{"properties":{"amount":{"maximum":10}}}`}, nil, nil)
	for _, body := range []string{`{"amount":1,"amount":1000}`, `{"amount":1} {"amount":1000}`, `{"amount":1`, ``} {
		got, _ := s.Validate(jsonReq(body))
		if len(got) != 1 || !strings.HasPrefix(got[0].Pointer, "/body") {
			t.Errorf("body %q: %+v", body, got)
		}
	}
	req := jsonReq(`{"amount":1}`)
	req.Header.Set("Content-Type", "text/plain")
	if got, _ := s.Validate(req); len(got) != 1 || got[0].Pointer != "/headers/content-type" {
		t.Errorf("text/plain body: %+v", got)
	}
	req.Header.Set("Content-Type", "application/merge-patch+json; charset=utf-8")
	if got, _ := s.Validate(req); len(got) != 0 {
		t.Errorf("+json body: %+v", got)
	}
}

// Headers, repeated query parameters and route parameters are checked as
// strings (arrays when repeated).
func TestValidateHeadersQueryParams(t *testing.T) {
	s := compile(t, map[string]string{
		"headers": `{"required":["x-tenant"],"properties":{"x-tenant":{"pattern":"^t-[0-9]+$"}}}`,
		"query":   `{"properties":{"tag":{"type":"array","maxItems":2}}}`,
		"params":  `{"properties":{"id":{"pattern":"^[0-9]+$"}}}`,
	}, nil, nil)
	req := &schemas.Request{Header: http.Header{"X-Tenant": {"acme"}}, RawQuery: "tag=a&tag=b&tag=c",
		Params: func(yield func(string, string) bool) { yield("id", "abc") }}
	got, _ := s.Validate(req)
	var ptrs []string
	for _, p := range got {
		ptrs = append(ptrs, p.Pointer)
	}
	if strings.Join(ptrs, " ") != "/params/id /query/tag /headers/x-tenant" {
		t.Fatalf("problems %+v", got)
	}
}

// A schema that is not valid JSON Schema, a reference outside the
// registry (a file, a URL) and a missing shared schema are refused with
// their place.
func TestCompileRequestRefusesBadSchemas(t *testing.T) {
	for name, tc := range map[string]struct{ schema, want string }{
		"type":     {`{"type":"nonsense"}`, "body"},
		"json":     {`{"type":`, "not valid JSON"},
		"file":     {`{"$ref":"file:///etc/passwd"}`, "only jetway:NAME"},
		"url":      {`{"$ref":"https://example.com/s.json"}`, "only jetway:NAME"},
		"missing":  {`{"$ref":"jetway:nope"}`, `no shared schema "nope"`},
		"badregex": {`{"pattern":"("}`, "body"},
	} {
		_, problems := schemas.CompileRequest(map[string]json.RawMessage{"body": json.RawMessage(tc.schema)}, nil,
			func(string) ([]byte, bool) { return nil, false })
		if len(problems) == 0 || !strings.Contains(problems[0].String(), tc.want) {
			t.Errorf("%s: problems %v, want one with %q", name, problems, tc.want)
		}
	}
	_, problems := schemas.CompileRequest(nil, map[string]string{"amount": "x", "/cookies/a": "y"}, nil)
	if len(problems) != 2 {
		t.Errorf("bad message pointers: %v", problems)
	}
}

// A shared schema is referenced by name, alone or composed.
func TestValidateSharedSchema(t *testing.T) {
	shared := func(name string) ([]byte, bool) {
		if name == "money" {
			return []byte(`{"$defs":{"cents":{"type":"integer","minimum":1}},"type":"object","required":["amount"],"properties":{"amount":{"$ref":"#/$defs/cents"}}}`), true
		}
		return nil, false
	}
	s := compile(t, map[string]string{"body": `{"allOf":[{"$ref":"jetway:money"}],"required":["to"]}`}, nil, shared)
	got, _ := s.Validate(jsonReq(`{"amount":0}`))
	if len(got) != 2 || got[0].Pointer != "/body/amount" || got[1].Pointer != "/body/to" {
		t.Fatalf("problems %+v", got)
	}
}

// BenchmarkValidateBody is the validator's own cost for a body: parse and
// check, as the edge does per call (see bench/ for the whole call).
func BenchmarkValidateBody(b *testing.B) {
	s, problems := schemas.CompileRequest(map[string]json.RawMessage{"body": json.RawMessage(`{"type":"object","required":["items"],
		"properties":{"items":{"type":"array","items":{"type":"object","required":["sku","quantity"],
		"properties":{"sku":{"type":"string","pattern":"^SKU-[0-9]{6}$"},"quantity":{"type":"integer","minimum":1},"name":{"type":"string"}}}}}}`)}, nil, nil)
	if len(problems) > 0 {
		b.Fatal(problems)
	}
	var items []string
	for i := range 12 {
		items = append(items, `{"sku":"SKU-00000`+string(rune('0'+i%10))+`","quantity":3,"name":"an item of the order"}`)
	}
	req := jsonReq(`{"items":[` + strings.Join(items, ",") + `]}`)
	b.SetBytes(int64(len(req.Body)))
	b.ReportAllocs()
	for b.Loop() {
		if p, _ := s.Validate(req); len(p) > 0 {
			b.Fatal(p)
		}
	}
}

// A body that would make the check costly, or that parsers read two ways,
// is refused before the validator walks it: keys equal under case folding
// (Go's encoding/json fills a field from either), invalid UTF-8, nesting
// past the bound, huge exponents and numbers, another charset, two
// Content-Types.
func TestValidateRefusesCostlyAndFoldedBodies(t *testing.T) {
	s := compile(t, map[string]string{"body": `{"type":["object","array"],"properties":{"amount":{"type":"integer","maximum":10}}}`}, nil, nil)
	for name, body := range map[string]string{
		"case":   `{"amount":5,"AMOUNT":1000}`,
		"case2":  `{"Amount":5,"amount":1000}`,
		"fold":   `{"s":1,"ſ":2}`,
		"kelvin": `{"k":1,"\u212a":2}`,
		"utf8":   "{\"amount\":5,\"x\":\"\xff\"}",
		"deep":   strings.Repeat("[", 200) + strings.Repeat("]", 200),
		"exp":    `[1e1000000]`,
		"negexp": `[1e-1000000]`,
		"digits": "[" + strings.Repeat("9", 150) + "]",
	} {
		got, _ := s.Validate(jsonReq(body))
		if len(got) != 1 || got[0].Pointer != "/body" || got[0].Rule != "json" {
			t.Errorf("%s: %+v", name, got)
		}
	}
	if got, _ := s.Validate(jsonReq(`{"amount":5,"Other":1,"other2":[1e300,0e5,0.0,-0,5e-324]}`)); len(got) != 0 {
		t.Errorf("a good body with mixed-case keys: %+v", got)
	}
	for _, ct := range [][]string{{"application/json; charset=iso-8859-1"}, {"application/json", "text/plain"}} {
		req := jsonReq(`{"amount":5}`)
		req.Header["Content-Type"] = ct
		if got, _ := s.Validate(req); len(got) != 1 || got[0].Rule != "content-type" {
			t.Errorf("Content-Type %q: %+v", ct, got)
		}
	}
}

// A body of very many problems is answered at the cost of counting them:
// only the listed ones are formatted.
func TestValidateManyProblemsIsBounded(t *testing.T) {
	s := compile(t, map[string]string{"body": `{"type":"array","items":{"type":"string"}}`}, nil, nil)
	body := "[" + strings.Repeat("1,", 99999) + "1]"
	got, more := s.Validate(jsonReq(body))
	if len(got) != schemas.MaxRequestProblems || len(got)+more != 100000 {
		t.Fatalf("%d listed, %d more", len(got), more)
	}
}
