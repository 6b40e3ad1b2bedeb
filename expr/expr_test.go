package expr_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/jetway-gw/jetway/expr"
)

func decode(b []byte) (any, error) {
	d := json.NewDecoder(strings.NewReader(string(b)))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}

// Conditions read the call's request, response, app and client.
func TestEval(t *testing.T) {
	in := &expr.Input{Method: "POST", Path: "/v1/pay", Header: http.Header{"X-Tenant": {"acme"}}, RawQuery: "v=2&v=3",
		App: "shop", ClientIP: "10.0.0.1", Status: 200, RespHeader: http.Header{"Content-Type": {"application/json"}},
		RespBody: []byte(`{"code":7,"items":[1,2.5]}`), Decode: decode}
	for src, want := range map[string]bool{
		`request.method == "POST" && request.headers["x-tenant"] == "acme"`: true,
		`request.query.v == "2"`:                            true,
		`app.id == "shop" && !app.sandbox`:                  true,
		`client.ip.startsWith("10.")`:                       true,
		`response.status == 200 && response.json.code != 0`: true,
		`response.json.items[1] > 2.0`:                      true,
		`"x-absent" in request.headers`:                     false,
		`request.path.matches("^/v2/")`:                     false,
	} {
		c, err := expr.Compile(src)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		got, err := c.Eval(in)
		if err != nil || got != want {
			t.Errorf("%s = %v, %v; want %v", src, got, err, want)
		}
	}
}

// A condition that is not bool, does not parse, names an unknown variable
// or is too long is refused when compiled; one that would cost too much,
// or reads an absent key, stops with an error when run.
func TestCompileAndCostBounds(t *testing.T) {
	for _, src := range []string{`1 + 2`, `1 +`, `nobody == 1`, strings.Repeat("true && ", 300) + "true"} {
		if _, err := expr.Compile(src); err == nil {
			t.Errorf("compiled: %.40s", src)
		}
	}
	in := &expr.Input{Header: http.Header{}}
	for _, src := range []string{
		`[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, [1,2,3,4,5,6,7,8,9,10].all(c, [1,2,3,4,5,6,7,8,9,10].all(d, a+b+c+d > 0))))`,
		`request.headers["x-absent"] == "1"`,
	} {
		c, err := expr.Compile(src)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Eval(in); err == nil {
			t.Errorf("ran without an error: %.60s", src)
		}
	}
}

// A variable is built once per run, however often a loop reads it: the
// body is parsed once, not once per element (a caller's large input
// would otherwise cost far more than the cost limit counts).
func TestVariablesBuiltOncePerRun(t *testing.T) {
	parses := 0
	in := &expr.Input{Status: 200, RespBody: []byte(`{"code":3,"items":[1,2,3,4,5,6,7,8,9,10]}`),
		Decode: func(b []byte) (any, error) { parses++; return decode(b) }}
	c, err := expr.Compile(`response.json.items.exists(x, x == response.json.code)`)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := c.Eval(in); err != nil || !ok {
		t.Fatalf("%v %v", ok, err)
	}
	if parses != 1 {
		t.Fatalf("the body was parsed %d times in one run", parses)
	}
}
