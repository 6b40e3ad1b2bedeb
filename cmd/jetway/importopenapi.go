package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/registry"
)

// openAPIOptions are the flags of `jetway api import-openapi`.
type openAPIOptions struct {
	pool    string // the drafts' production pool; default the title's
	prefix  string // route prefix; default none
	backend string // the backend's base URL; default servers[0].url
}

// openAPIDoc is what import-openapi reads of an OpenAPI 3.0 or 3.1
// document: the operations, their parameters and JSON request bodies,
// and the components they reference.
type openAPIDoc struct {
	OpenAPI string `json:"openapi"`
	Info    struct {
		Title   string `json:"title"`
		Version string `json:"version"`
	} `json:"info"`
	Servers []struct {
		URL string `json:"url"`
	} `json:"servers"`
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		Schemas       map[string]any            `json:"schemas"`
		Parameters    map[string]openAPIParam   `json:"parameters"`
		RequestBodies map[string]openAPIReqBody `json:"requestBodies"`
	} `json:"components"`
}

type openAPIOperation struct {
	OperationID string          `json:"operationId"`
	Summary     string          `json:"summary"`
	Parameters  []openAPIParam  `json:"parameters"`
	RequestBody *openAPIReqBody `json:"requestBody"`
}

type openAPIParam struct {
	Ref      string         `json:"$ref"`
	Name     string         `json:"name"`
	In       string         `json:"in"`
	Required bool           `json:"required"`
	Schema   any            `json:"schema"`
	Content  map[string]any `json:"content"`
}

type openAPIReqBody struct {
	Ref      string `json:"$ref"`
	Required bool   `json:"required"`
	Content  map[string]struct {
		Schema any `json:"schema"`
	} `json:"content"`
}

// openAPIMethods are the operations an API can route, in the order drafts
// are written.
var openAPIMethods = []string{"get", "head", "post", "put", "patch", "delete", "options"}

// draft is one draft API entry to write: what it is called in messages,
// its entry, and where its sandbox tier goes.
type draft struct {
	label, target string
	name          string // the API's, when known
	doc           []byte
}

// openAPIDrafts turns an OpenAPI document (JSON or YAML) into one draft
// per operation (registry/draft.go), validated: it calls the backend, is
// served to sandbox apps only until promoted, needs an app's key, and
// checks the request against the operation's parameters and JSON body.
// What cannot be carried over is said in the warnings; an operation that
// cannot be an API at all is skipped with its reason.
func openAPIDrafts(raw []byte, o openAPIOptions) (drafts []draft, warnings []string, err error) {
	js, err := registry.ToJSON(raw)
	if err != nil {
		return nil, nil, err
	}
	var doc openAPIDoc
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return nil, nil, fmt.Errorf("not an OpenAPI document: %w", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		return nil, nil, fmt.Errorf("not an OpenAPI 3 document (openapi: %q); convert a Swagger 2.0 one first", doc.OpenAPI)
	}
	conv := &schemaConverter{components: doc.Components.Schemas, v30: strings.HasPrefix(doc.OpenAPI, "3.0")}
	pool := o.pool
	if pool == "" {
		pool = strings.ToLower(nameToken(doc.Info.Title))
	}
	if err := bus.ValidName(pool); err != nil {
		return nil, nil, fmt.Errorf("pool %q: %v (give --pool)", pool, err)
	}
	base := o.backend
	if base == "" && len(doc.Servers) > 0 {
		base = doc.Servers[0].URL
	}
	if u, err := url.Parse(base); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, nil, fmt.Errorf("the backend %q is not an absolute http(s) URL: give --backend", base)
	}
	base = strings.TrimRight(base, "/")
	prefix := strings.TrimRight(o.prefix, "/")
	warn := func(format string, args ...any) { warnings = append(warnings, fmt.Sprintf(format, args...)) }
	names := map[string]string{} // API name → the operation that has it

	for _, path := range slices.Sorted(mapKeys(doc.Paths)) {
		item := doc.Paths[path]
		var shared []openAPIParam
		if p, ok := item["parameters"]; ok {
			if err := json.Unmarshal(p, &shared); err != nil {
				warn("%s: parameters do not read: %v", path, err)
			}
		}
		for _, method := range openAPIMethods {
			rawOp, ok := item[method]
			if !ok {
				continue
			}
			var op openAPIOperation
			d := json.NewDecoder(bytes.NewReader(rawOp))
			d.UseNumber()
			if err := d.Decode(&op); err != nil {
				warn("%s %s skipped: the operation does not read: %v", strings.ToUpper(method), path, err)
				continue
			}
			label := strings.ToUpper(method) + " " + path
			dr, ws, err := openAPIDraft(&doc, conv, &op, shared, method, path, pool, prefix, base)
			for _, w := range ws {
				warn("%s: %s", label, w)
			}
			if err != nil {
				warn("%s skipped: %v", label, err)
				continue
			}
			dr.label = label
			if prev, ok := names[dr.name]; ok {
				warn("%s skipped: its API name %s is %s's already (give it an operationId of its own)", label, dr.name, prev)
				continue
			}
			names[dr.name] = label
			drafts = append(drafts, dr)
		}
	}
	return drafts, warnings, nil
}

// openAPIDraft is the draft of one operation.
func openAPIDraft(doc *openAPIDoc, conv *schemaConverter, op *openAPIOperation, shared []openAPIParam, method, path, pool, prefix, base string) (draft, []string, error) {
	var warnings []string
	warn := func(format string, args ...any) { warnings = append(warnings, fmt.Sprintf(format, args...)) }
	route, renamed, err := openAPIRoute(path)
	if err != nil {
		return draft{}, nil, err
	}
	name := op.OperationID
	if name == "" {
		name = method + "-" + path
	}
	name = pool + "." + nameToken(name)
	if err := bus.ValidName(name); err != nil {
		return draft{}, nil, fmt.Errorf("no API name from operationId %q: %v", op.OperationID, err)
	}

	// The operation's parameters, over the path's (by name and place).
	params := map[[2]string]openAPIParam{}
	var order [][2]string
	for _, p := range append(slices.Clone(shared), op.Parameters...) {
		if p.Ref != "" {
			ref, ok := strings.CutPrefix(p.Ref, "#/components/parameters/")
			if !ok || doc.Components.Parameters[ref].Name == "" {
				warn("parameter %s is not in components.parameters: not checked", p.Ref)
				continue
			}
			p = doc.Components.Parameters[ref]
		}
		k := [2]string{p.In, p.Name}
		if _, ok := params[k]; !ok {
			order = append(order, k)
		}
		params[k] = p
	}
	validate := map[string]any{}
	parts := map[string]map[string]any{} // part → properties
	required := map[string][]string{}
	used := map[string]map[string]bool{} // part → the components its schemas use
	for _, k := range order {
		p := params[k]
		part, name := "", p.Name
		switch p.In {
		case "path":
			part, p.Required = "params", true
			if r, ok := renamed[name]; ok {
				name = r
			}
		case "query":
			part = "query"
		case "header":
			part, name = "headers", strings.ToLower(name)
		default:
			warn("%s parameter %q is not checked", p.In, p.Name)
			continue
		}
		if p.Schema == nil && p.Content != nil {
			warn("parameter %q is described by content, not schema: only its presence is checked", p.Name)
		}
		if used[part] == nil {
			used[part] = map[string]bool{}
		}
		s, lost, err := conv.parameter(p.Schema, used[part])
		if err != nil {
			warn("parameter %q: %v: not checked", p.Name, err)
			s = map[string]any{}
		}
		if len(lost) > 0 {
			warn("parameter %q: %s cannot be checked on the text of a parameter: left to the backend", p.Name, strings.Join(lost, ", "))
		}
		if parts[part] == nil {
			parts[part] = map[string]any{}
		}
		parts[part][name] = s
		if p.Required {
			required[part] = append(required[part], name)
		}
	}
	for part, props := range parts {
		s := map[string]any{"type": "object", "properties": props}
		if len(required[part]) > 0 {
			s["required"] = required[part]
		}
		withDefs, err := conv.withDefs(s, used[part])
		if err != nil {
			warn("%s parameters: %v: not checked", part, err)
			continue
		}
		validate[part] = withDefs
	}

	if rb := op.RequestBody; rb != nil {
		if rb.Ref != "" {
			ref, _ := strings.CutPrefix(rb.Ref, "#/components/requestBodies/")
			b, ok := doc.Components.RequestBodies[ref]
			if !ok {
				return draft{}, warnings, fmt.Errorf("request body %s is not in components.requestBodies", rb.Ref)
			}
			rb = &b
		}
		var schema any
		found := false
		for _, ct := range slices.Sorted(mapKeys(rb.Content)) {
			mt, _, _ := strings.Cut(ct, ";")
			mt = strings.TrimSpace(strings.ToLower(mt))
			if mt == "application/json" || strings.HasSuffix(mt, "+json") {
				schema, found = rb.Content[ct].Schema, true
				break
			}
		}
		switch {
		case !found:
			warn("the request body is not JSON: not checked")
		case !rb.Required:
			warn("the request body is optional, and Jetway checks only a body that must be there: not checked (set requestBody.required to check it)")
		case schema == nil:
		default:
			s, err := conv.body(schema)
			if err != nil {
				warn("the request body's schema: %v: not checked", err)
			} else {
				validate["body"] = s
			}
		}
	}

	backendPath := path
	for from, to := range renamed {
		backendPath = strings.ReplaceAll(backendPath, "{"+from+"}", "{"+to+"}")
	}
	entry := map[string]any{
		"name": name,
		"pool": pool,
		"description": fmt.Sprintf("%s %s, %s %s (jetway api import-openapi). %s",
			doc.Info.Title, doc.Info.Version, strings.ToUpper(method), path, op.Summary),
		"route":   map[string]string{"method": strings.ToUpper(method), "path": prefix + route},
		"auth":    map[string]any{"methods": []string{"key"}},
		"backend": map[string]string{"type": registry.BackendHTTP, "url": base + backendPath},
	}
	if len(validate) > 0 {
		entry["validate"] = validate
	}
	b, err := json.Marshal(entry)
	if err != nil {
		return draft{}, warnings, err
	}
	if _, err := registry.ParseAPI(registry.DraftKey(name), b); err != nil {
		return draft{}, warnings, err
	}
	return draft{doc: b, name: name, target: base + backendPath}, warnings, nil
}

// openAPIRoute is an OpenAPI path as a route path: each {name} a whole
// segment; a name a route parameter may not have (pet-id) is renamed
// (pet_id), and renamed says so.
func openAPIRoute(path string) (string, map[string]string, error) {
	if !strings.HasPrefix(path, "/") {
		return "", nil, fmt.Errorf("path %q does not start with /", path)
	}
	renamed := map[string]string{}
	segs := strings.Split(path, "/")
	for i, s := range segs {
		if !strings.ContainsAny(s, "{}") {
			continue
		}
		name, ok := strings.CutPrefix(s, "{")
		name, ok2 := strings.CutSuffix(name, "}")
		if !ok || !ok2 || strings.ContainsAny(name, "{}") {
			return "", nil, fmt.Errorf("segment %q: a route parameter is a whole segment", s)
		}
		if n := paramToken(name); n != name {
			renamed[name] = n
			segs[i] = "{" + n + "}"
		}
	}
	return strings.Join(segs, "/"), renamed, nil
}

var (
	notNameChar  = regexp.MustCompile(`[^A-Za-z0-9_-]+`)
	notParamChar = regexp.MustCompile(`[^A-Za-z0-9_]`)
)

// nameToken makes text one token of an API or pool name (an operationId
// such as listPets stays as it is).
func nameToken(s string) string {
	t := strings.Trim(notNameChar.ReplaceAllString(strings.TrimSpace(s), "-"), "-")
	if len(t) > 64 {
		t = t[:64]
	}
	return t
}

// paramToken makes a name a route parameter's: letters, digits and _.
func paramToken(s string) string {
	t := notParamChar.ReplaceAllString(s, "_")
	if t == "" || (t[0] >= '0' && t[0] <= '9') {
		t = "p_" + t
	}
	return t
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// schemaConverter turns OpenAPI schemas into JSON Schema 2020-12: an
// OpenAPI 3.1 schema already is one; a 3.0 one loses nullable (a "null"
// type instead) and its boolean exclusiveMinimum/Maximum. A reference to
// components.schemas becomes one to the body schema's $defs.
type schemaConverter struct {
	components map[string]any
	v30        bool
}

// body converts a body's schema, with the components it references
// (transitively) under $defs.
func (c *schemaConverter) body(s any) (any, error) {
	used := map[string]bool{}
	out, err := c.convert(s, used)
	if err != nil {
		return nil, err
	}
	return c.withDefs(out, used)
}

// withDefs puts the components used (and those they use) under a root
// schema's $defs, where its references point.
func (c *schemaConverter) withDefs(out any, used map[string]bool) (any, error) {
	if len(used) == 0 {
		return out, nil
	}
	defs := map[string]any{}
	for len(defs) < len(used) {
		for name := range used {
			if _, done := defs[name]; done {
				continue
			}
			comp, ok := c.components[name]
			if !ok {
				return nil, fmt.Errorf("$ref to components.schemas.%s, which is not there", name)
			}
			d, err := c.convert(comp, used)
			if err != nil {
				return nil, err
			}
			defs[name] = d
		}
	}
	m, ok := out.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("the schema is not an object")
	}
	if own, ok := m["$defs"].(map[string]any); ok {
		for k, v := range own {
			if _, clash := defs[k]; clash {
				return nil, fmt.Errorf("$defs.%s is also a component it references", k)
			}
			defs[k] = v
		}
	}
	m["$defs"] = defs
	return m, nil
}

// parameter converts a parameter's schema for what the edge checks: a
// string (each query, header and path value is one), or an array of them
// for a query parameter given more than once. A number or boolean becomes
// a string of its form; the keywords that bound a number cannot be checked
// on a string, and lost names them.
func (c *schemaConverter) parameter(s any, used map[string]bool) (_ any, lost []string, _ error) {
	if m, ok := s.(map[string]any); ok {
		if ref, ok := m["$ref"].(string); ok {
			name, ok := strings.CutPrefix(ref, componentsPrefix)
			if !ok || c.components[name] == nil {
				return nil, nil, fmt.Errorf("$ref %s is not in components.schemas", ref)
			}
			s = c.components[name]
		}
	}
	m, _ := s.(map[string]any)
	if m == nil {
		return map[string]any{"type": "string"}, nil, nil
	}
	for _, k := range []string{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"} {
		if _, ok := m[k]; ok {
			lost = append(lost, k)
		}
	}
	str := func(pattern string) map[string]any {
		out := map[string]any{"type": "string", "pattern": pattern}
		if e, ok := m["enum"].([]any); ok {
			vals := make([]any, 0, len(e))
			for _, v := range e {
				vals = append(vals, fmt.Sprint(v))
			}
			out = map[string]any{"enum": vals}
		}
		return out
	}
	switch m["type"] {
	case "integer":
		return str("^-?[0-9]+$"), lost, nil
	case "number":
		return str(`^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$`), lost, nil
	case "boolean":
		return map[string]any{"enum": []any{"true", "false"}}, nil, nil
	case "array":
		item, itemLost, err := c.parameter(m["items"], used)
		if err != nil {
			return nil, nil, err
		}
		// Given once, a parameter is its one value; more often, an array.
		many := map[string]any{"type": "array", "items": item}
		for _, k := range []string{"minItems", "maxItems", "uniqueItems"} {
			if v, ok := m[k]; ok {
				many[k] = v
			}
		}
		if n, _ := m["minItems"].(json.Number); n != "" && n != "0" && n != "1" {
			return many, itemLost, nil // one value is too few
		}
		return map[string]any{"anyOf": []any{item, many}}, itemLost, nil
	case "string", nil:
		out, err := c.convert(m, used) // a reference inside goes to the part's $defs
		if err != nil {
			return nil, nil, err
		}
		o := out.(map[string]any)
		o["type"] = "string"
		return o, nil, nil
	}
	return nil, nil, fmt.Errorf("a %v parameter", m["type"])
}

// The keywords whose values are schemas, maps of schemas and arrays of
// schemas: convert goes into these only (a property named "nullable" is
// a property, not the keyword).
var (
	schemaKeywords   = []string{"items", "additionalProperties", "not", "contains", "propertyNames", "if", "then", "else", "unevaluatedItems", "unevaluatedProperties"}
	schemaMaps       = []string{"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
	schemaArrays     = []string{"allOf", "anyOf", "oneOf", "prefixItems"}
	componentsPrefix = "#/components/schemas/"
)

// convert is one schema converted; used collects the components it
// references.
func (c *schemaConverter) convert(s any, used map[string]bool) (any, error) {
	m, ok := s.(map[string]any)
	if !ok {
		return s, nil // true, false
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	if ref, ok := m["$ref"].(string); ok {
		name, ok := strings.CutPrefix(ref, componentsPrefix)
		if !ok || strings.Contains(name, "/") {
			return nil, fmt.Errorf("$ref %q: only references to components.schemas are read", ref)
		}
		used[name] = true
		out["$ref"] = "#/$defs/" + name
	}
	if c.v30 {
		if n, _ := m["nullable"].(bool); n {
			// Null joins the type; an enum still applies (OpenAPI 3.0.3:
			// a null must be one of its values to be allowed).
			if t, ok := m["type"].(string); ok {
				out["type"] = []any{t, "null"}
			}
		}
		delete(out, "nullable")
		for _, b := range [][2]string{{"exclusiveMinimum", "minimum"}, {"exclusiveMaximum", "maximum"}} {
			if ex, ok := m[b[0]].(bool); ok {
				delete(out, b[0])
				if bound, has := m[b[1]]; ex && has {
					out[b[0]] = bound
					delete(out, b[1])
				}
			}
		}
	}
	var err error
	for _, k := range schemaKeywords {
		if v, ok := out[k]; ok {
			if out[k], err = c.convert(v, used); err != nil {
				return nil, err
			}
		}
	}
	for _, k := range schemaMaps {
		if sm, ok := out[k].(map[string]any); ok {
			conv := make(map[string]any, len(sm))
			for name, v := range sm {
				if conv[name], err = c.convert(v, used); err != nil {
					return nil, err
				}
			}
			out[k] = conv
		}
	}
	for _, k := range schemaArrays {
		if sa, ok := out[k].([]any); ok {
			conv := make([]any, len(sa))
			for i, v := range sa {
				if conv[i], err = c.convert(v, used); err != nil {
					return nil, err
				}
			}
			out[k] = conv
		}
	}
	return out, nil
}
