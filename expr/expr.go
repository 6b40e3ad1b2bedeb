// Package expr is the one CEL environment (cel.dev/cel-go) that conditions
// in registry entries are written in (a rewrite's "when" today). It knows
// four variables, each a map:
//
//	request   method, path, headers (lower-case names, repeated values
//	          joined with ", "), query (the first value of each parameter)
//	response  status, headers, json (the body parsed, when it is JSON)
//	app       id ("" for an anonymous caller), sandbox
//	client    ip
//
// A condition is a bool expression of at most MaxLength characters. It is
// compiled (parsed and type-checked) when the entry is published and once
// per registry change at the edge, and runs with a cost limit (MaxCost):
// one that would run longer stops with an error, so no entry can make a
// call spin. A key a map lacks (request.headers["x-absent"]) is an error
// too; write `"x-absent" in request.headers` first.
package expr

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/interpreter"
)

// Bounds of a condition.
const (
	MaxLength = 2048
	// MaxCost is the evaluation cost a condition may spend per call
	// (CEL's cost units: about one per operation and per element an
	// operation walks).
	MaxCost = 10_000
)

var env = sync.OnceValues(func() (*cel.Env, error) {
	m := cel.MapType(cel.StringType, cel.DynType)
	return cel.NewEnv(
		cel.Variable("request", m),
		cel.Variable("response", m),
		cel.Variable("app", m),
		cel.Variable("client", m),
	)
})

// Cond is a compiled condition; safe for concurrent use.
type Cond struct {
	src      string
	prg      cel.Program
	usesJSON bool // it reads response.json: the body is parsed only then
}

// Compile parses and checks a condition.
func Compile(src string) (*Cond, error) {
	if len(src) > MaxLength {
		return nil, fmt.Errorf("a condition may have at most %d characters, not %d", MaxLength, len(src))
	}
	e, err := env()
	if err != nil {
		return nil, err
	}
	ast, iss := e.Compile(src)
	if iss.Err() != nil {
		return nil, iss.Err()
	}
	if ast.OutputType() != cel.BoolType && ast.OutputType() != cel.DynType {
		return nil, fmt.Errorf("a condition must be true or false, not %v", ast.OutputType())
	}
	prg, err := e.Program(ast, cel.CostLimit(MaxCost))
	if err != nil {
		return nil, err
	}
	return &Cond{src: src, prg: prg, usesJSON: strings.Contains(src, "json")}, nil
}

// String is the condition's source.
func (c *Cond) String() string { return c.src }

// Input is what a condition may read of a call. Fields that do not apply
// (a response before there is one) stay zero.
type Input struct {
	Method   string
	Path     string
	Header   http.Header
	RawQuery string
	App      string
	Sandbox  bool
	ClientIP string

	Status     int
	RespHeader http.Header
	RespBody   []byte
	// Decode parses a JSON response body; nil: response.json is absent.
	Decode func([]byte) (any, error)
}

// Eval runs the condition on a call. An error (a cost over MaxCost, a key
// a map lacks, a type it cannot compare) is the condition's, returned so
// that the caller decides what it means (a rewrite then does not apply).
func (c *Cond) Eval(in *Input) (bool, error) {
	out, _, err := c.prg.Eval(&activation{in: in, json: c.usesJSON})
	if err != nil {
		return false, err
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, errors.New("the condition is not true or false")
	}
	return b, nil
}

// activation gives the variables, each built the first time a condition
// reads it and kept for the rest of the run: CEL asks for a variable at
// every mention, on every pass of a loop, and rebuilding the headers or
// re-parsing the body each time would make a loop's cost grow with the
// caller's input, past what the cost limit counts.
type activation struct {
	in   *Input
	json bool
	vars [4]map[string]any // request, response, app, client; nil: not built
}

func (a *activation) Parent() interpreter.Activation { return nil }

func (a *activation) ResolveName(name string) (any, bool) {
	var i int
	switch name {
	case "request":
		i = 0
	case "response":
		i = 1
	case "app":
		i = 2
	case "client":
		i = 3
	default:
		return nil, false
	}
	if a.vars[i] == nil {
		a.vars[i] = a.build(i)
	}
	return a.vars[i], true
}

func (a *activation) build(i int) map[string]any {
	in := a.in
	switch i {
	case 0:
		return map[string]any{"method": in.Method, "path": in.Path, "headers": headerMap(in.Header), "query": queryMap(in.RawQuery)}
	case 1:
		m := map[string]any{"status": int64(in.Status), "headers": headerMap(in.RespHeader)}
		if a.json && in.Decode != nil && len(in.RespBody) > 0 {
			if v, err := in.Decode(in.RespBody); err == nil {
				m["json"] = celValue(v)
			}
		}
		return m
	case 2:
		return map[string]any{"id": in.App, "sandbox": in.Sandbox}
	}
	return map[string]any{"ip": in.ClientIP}
}

func headerMap(h http.Header) map[string]string {
	m := make(map[string]string, len(h))
	for k, vs := range h {
		m[strings.ToLower(k)] = strings.Join(vs, ", ")
	}
	return m
}

func queryMap(raw string) map[string]string {
	q, _ := url.ParseQuery(raw) // what parses; a bad pair is not a parameter
	m := make(map[string]string, len(q))
	for k, vs := range q {
		m[k] = vs[0]
	}
	return m
}

// celValue turns a parsed JSON value (int64 and json.Number numbers) into
// one CEL reads: integers as int, other numbers as double.
func celValue(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = celValue(e)
		}
		return m
	case []any:
		a := make([]any, len(x))
		for i, e := range x {
			a[i] = celValue(e)
		}
		return a
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	}
	return v
}
