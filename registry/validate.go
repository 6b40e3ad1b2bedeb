package registry

import (
	"encoding/json"

	"github.com/jetway-gw/jetway/schemas"
)

// Validate is an API's request validation (at the edge, before anything is
// published): a JSON Schema (2020-12) per part of the request. A request
// that fails gets Status (default 400) and every problem, each with a JSON
// pointer into {"body","headers","query","params"}, the rule that failed
// and Messages[pointer] where the entry gives one.
type Validate struct {
	Body    json.RawMessage `json:"body,omitempty"`
	Headers json.RawMessage `json:"headers,omitempty"`
	Query   json.RawMessage `json:"query,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	// Status is the status of a refused request (400–499).
	Status int `json:"status,omitempty"`
	// Messages are the entry's own messages, by the pointer of a field.
	Messages map[string]string `json:"messages,omitempty"`
}

// Parts returns the schemas by part (schemas.PartBody, …).
func (v *Validate) Parts() map[string]json.RawMessage {
	m := map[string]json.RawMessage{}
	for part, doc := range map[string]json.RawMessage{schemas.PartBody: v.Body, schemas.PartHeaders: v.Headers,
		schemas.PartQuery: v.Query, schemas.PartParams: v.Params} {
		if doc != nil {
			m[part] = doc
		}
	}
	return m
}

// Compile compiles the schemas, resolving shared references with shared.
func (v *Validate) Compile(shared schemas.SharedFunc) (*schemas.RequestSchema, []schemas.Problem) {
	return schemas.CompileRequest(v.Parts(), v.Messages, shared)
}

// StatusOrDefault is the status of a refused request.
func (v *Validate) StatusOrDefault() int {
	if v.Status == 0 {
		return 400
	}
	return v.Status
}

// check adds the problems of the schemas at prefix (shared references are
// taken on trust here: api put checks them against the registry).
func (v *Validate) check(prefix string, add func(path, format string, args ...any)) {
	if v == nil {
		return
	}
	_, problems := v.Compile(schemas.AnyShared)
	for _, p := range problems {
		add(prefix+"."+p.Path, "%s", p.Message)
	}
}
