package registry

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/schemas"
)

// Defaults applied to fields an entry leaves out.
const (
	DefaultTimeout     = 10 * time.Second
	MaxTimeout         = 5 * time.Minute
	DefaultConcurrency = 64
	DefaultMaxBody     = Size(1 << 20)
	// HeaderRoom is what a request leaves of the NATS max payload for its
	// headers: a body may take the rest.
	HeaderRoom = 64 << 10
	// MaxMaxBody is the ceiling on max_body: the embedded server's max
	// payload less HeaderRoom (8 MiB − 64 KiB), as documented; a larger
	// body could never travel in one message with its headers. At run time
	// the edge also caps it by the connected server's max payload, minus
	// HeaderRoom.
	MaxMaxBody = Size(bus.EmbeddedMaxPayload - HeaderRoom)
)

// API is one published API: the value of its key in the jetway_apis bucket.
// The JSON form is the contract described by schemas/api.schema.json.
//
// An API is immutable once it is in a Snapshot: the hot path shares it
// between goroutines without locks.
type API struct {
	Name        string  `json:"name"`
	Pool        string  `json:"pool"`
	Description string  `json:"description,omitempty"`
	Owner       string  `json:"owner,omitempty"` // who answers for it: SLA reports go by it (CheckOwner)
	Route       Route   `json:"route"`
	Backend     Backend `json:"backend,omitzero"`
	// Channels serve the API instead of Backend: a set of backends with
	// their weights and order, moved by the controller (channels.go).
	Channels      []Channel      `json:"channels,omitempty"`
	ChannelPolicy *ChannelPolicy `json:"channel_policy,omitempty"`
	// Release is a gray release over the channels (channels.go).
	Release     *Release `json:"release,omitempty"`
	Timeout     Duration `json:"timeout,omitempty"`
	Concurrency int      `json:"concurrency,omitempty"`
	MaxBody     Size     `json:"max_body,omitempty"`

	// Traffic governance (policy.go).
	RateLimits      []RateLimit `json:"rate_limits,omitempty"`
	EdgeConcurrency int         `json:"edge_concurrency,omitempty"`
	Breaker         *Breaker    `json:"breaker,omitempty"`
	Retry           *Retry      `json:"retry,omitempty"`
	Fallback        *Fallback   `json:"fallback,omitempty"`
	IPRules         *IPRules    `json:"ip_rules,omitempty"`
	Auth            *Auth       `json:"auth,omitempty"`

	// Request policies (validate.go, cache.go).
	Validate *Validate `json:"validate,omitempty"`
	Cache    *Cache    `json:"cache,omitempty"`
	Rewrite  *Rewrite  `json:"rewrite,omitempty"`
	// Classify is the API's one definition of a failed call (classify.go).
	Classify *Classify `json:"classify,omitempty"`
	// Cases are saved sample calls and what their answers must be
	// (jetway api test runs them).
	Cases []Case `json:"cases,omitempty"`
	// Async lets callers submit calls as jobs (async.go).
	Async *Async `json:"async,omitempty"`

	// Sandbox is the tier that sandbox apps call instead (sandbox.go).
	Sandbox *Sandbox `json:"sandbox,omitempty"`

	// Created is the KV revision at which the API was first published (in
	// its current life: a deleted and republished API starts again). It
	// decides who holds a route that several APIs claim (routes.go), so it
	// must not change with the API's own edits: Client.Put stamps it into
	// every later revision. An entry without it was created at its own
	// revision. Entries read from KV always have it set.
	Created uint64 `json:"created_revision,omitempty"`

	// Revision is the KV revision this entry was read at (0 if it was not
	// read from KV). Not part of the stored JSON.
	Revision uint64 `json:"-"`

	sandbox bool // this is the sandbox tier of the API (SandboxAPI)
	draft   bool // this is the API's draft, stored under DraftKey(Name) (draft.go)
}

// Route says which HTTP requests belong to the API.
type Route struct {
	Method string `json:"method,omitempty"`
	Path   string `json:"path"`
	// Host limits the route to one host (api.example.com) or every name
	// under a domain (*.example.com); empty: every host. Stored lower-case.
	Host string `json:"host,omitempty"`
}

// Backend says what serves the API. Type selects the adapter; the other
// fields belong to one type each (backends.go has the table of types).
// Several channels per API extend this without changing the wire.
type Backend struct {
	Type string `json:"type"`

	// http
	URL string `json:"url,omitempty"`
	// http (an https:// URL) and grpc: the TLS of the calls
	TLS *BackendTLS `json:"tls,omitempty"`

	// nats: the subject a NATS service answers on, under bus.ServicePrefix
	// on Jetway's own NATS, or any literal subject on the server a secret
	// of the API's pool describes
	Subject string     `json:"subject,omitempty"`
	Server  *SecretRef `json:"server,omitempty"`

	// grpc: the server's host:port and the method called, by server
	// reflection (plaintext unless TLS is set)
	Target string `json:"target,omitempty"`
	Method string `json:"method,omitempty"` // package.Service/Method
	// Metadata lists the request headers sent as gRPC metadata (the
	// request id and trace context always are).
	Metadata []string `json:"metadata,omitempty"`
	// AllowUnknownQuery ignores query parameters that name no field of
	// the request message, instead of answering 400.
	AllowUnknownQuery bool `json:"allow_unknown_query,omitempty"`
	// Schema pins the method's schema to one stored in jetway_schemas
	// (sha256:<hex>, from jetway schema put) instead of reflection.
	Schema string `json:"schema,omitempty"`
	// JSONOptions shape the JSON of gRPC responses.
	JSONOptions *GRPCJSON `json:"json_options,omitempty"`

	// mock
	Static
}

// BackendTLS is how an https backend's TLS is checked and how the worker
// proves itself to it. The files are on the worker's host.
type BackendTLS struct {
	CA         string `json:"ca_file,omitempty"`     // PEM bundle to verify with; empty: the system's roots
	Cert       string `json:"cert_file,omitempty"`   // PEM client certificate, with Key: mutual TLS
	Key        string `json:"key_file,omitempty"`    // PEM key of Cert
	ServerName string `json:"server_name,omitempty"` // the name to verify and send (SNI); empty: the URL's host
}

// GRPCJSON is how a gRPC response message is written as JSON (the proto3
// JSON mapping, with 64-bit integers as strings, by default).
type GRPCJSON struct {
	EnumsAsNumbers  bool `json:"enums_as_numbers,omitempty"` // enums as their numbers, not names
	EmitUnpopulated bool `json:"emit_unpopulated,omitempty"` // fields at their zero value too
	ProtoNames      bool `json:"proto_names,omitempty"`      // field names as in the .proto, not lowerCamel
	Int64AsNumbers  bool `json:"int64_as_numbers,omitempty"` // 64-bit integers as JSON numbers, not strings
}

// Static is a fixed response written in an entry: a mock backend's answer,
// or a degrade switch's.
type Static struct {
	Status  int               `json:"status,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    *string           `json:"body,omitempty"`
	JSON    json.RawMessage   `json:"json,omitempty"`
}

// Compile returns the response ready to send: status (defaultStatus when
// none is set), headers, and body (JSON sets Content-Type:
// application/json unless the headers give one). Call it once, when the
// registry changes; the results are shared by every request and must not be
// modified.
func (s *Static) Compile(defaultStatus int) (int, http.Header, []byte) {
	status := s.Status
	if status == 0 {
		status = defaultStatus
	}
	h := http.Header{}
	for k, v := range s.Headers {
		h.Set(k, v)
	}
	var body []byte
	switch {
	case s.Body != nil:
		body = []byte(*s.Body)
	case s.JSON != nil:
		body = []byte(s.JSON)
		if h.Get("Content-Type") == "" {
			h.Set("Content-Type", "application/json")
		}
	}
	return status, h, body
}

// HasBody reports whether the response has a body of its own.
func (s *Static) HasBody() bool { return s.Body != nil || s.JSON != nil }

// check adds the problems of a static response at path prefix.
func (s *Static) check(prefix string, add func(path, format string, args ...any)) {
	if s.Body != nil && s.JSON != nil {
		add(prefix, "give body or json, not both")
	}
	if s.JSON != nil && !json.Valid(s.JSON) {
		add(prefix+".json", "must be a JSON value")
	}
	for k, v := range s.Headers {
		if !validHeaderName(k) || strings.ContainsAny(v, "\r\n\x00") {
			add(prefix+".headers."+k, "is not a valid HTTP header")
		}
	}
}

// TimeoutOrDefault is the API's deadline.
func (a *API) TimeoutOrDefault() time.Duration {
	if a.Timeout <= 0 {
		return DefaultTimeout
	}
	return time.Duration(a.Timeout)
}

// ValidationError lists every problem found in an entry.
type ValidationError struct {
	Key      string // the KV key or file the entry came from, if known
	Problems []schemas.Problem
	// Revision is the KV revision of a stored value that does not
	// validate (0: not a stored value), which the write that mends or
	// clears it names.
	Revision uint64
}

func (e *ValidationError) Error() string {
	var b strings.Builder
	if e.Key != "" {
		b.WriteString("invalid entry ")
		b.WriteString(e.Key)
	} else {
		b.WriteString("invalid entry")
	}
	for i, p := range e.Problems {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(p.String())
	}
	return b.String()
}

// ErrEmpty is returned for an empty document.
var ErrEmpty = errors.New("empty document")

// ToJSON converts a JSON or YAML document to JSON. JSON passes unchanged.
func ToJSON(doc []byte) ([]byte, error) {
	trimmed := bytes.TrimSpace(doc)
	if len(trimmed) == 0 {
		return nil, ErrEmpty
	}
	if trimmed[0] == '{' || trimmed[0] == '[' {
		return trimmed, nil
	}
	var v any
	if err := yaml.Unmarshal(trimmed, &v); err != nil {
		return nil, fmt.Errorf("parsing yaml: %w", err)
	}
	out, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("converting yaml to json: %w", err)
	}
	return out, nil
}

// ParseAPI decodes, validates and defaults one API entry given as JSON or
// YAML. On failure it returns a *ValidationError listing every problem with
// its field path. key, when not empty, is the KV key the entry is stored
// under and must equal the entry's name; a key under DraftPrefix holds a
// draft (draft.go) of the API the entry names.
func ParseAPI(key string, doc []byte) (*API, error) {
	name, draft := strings.CutPrefix(key, DraftPrefix)
	return parseAPIDoc(name, draft, doc)
}

// parseAPIDoc is ParseAPI for the entry of the API name ("": any), as a
// draft or as the production entry.
func parseAPIDoc(key string, draft bool, doc []byte) (*API, error) {
	js, err := ToJSON(doc)
	if err != nil {
		return nil, &ValidationError{Key: key, Problems: []schemas.Problem{{Message: err.Error()}}}
	}
	if !json.Valid(js) {
		return nil, &ValidationError{Key: key, Problems: schemas.ValidateAPI(js)}
	}
	a := API{draft: draft}
	decodeProblems, failed := a.decodeFields(js)
	a.defaultGRPCRoute()
	var semantic []schemas.Problem
	for _, p := range a.check(key) {
		if !failed[p.Path] {
			semantic = append(semantic, p)
		}
	}
	problems := mergeProblems(append(semantic, decodeProblems...), schemas.ValidateAPI(js))
	if len(problems) > 0 {
		return nil, &ValidationError{Key: key, Problems: problems}
	}
	a.applyDefaults()
	return &a, nil
}

// parseAPIAt is ParseAPI for a value stored under key at revision rev: it
// sets Revision, and Created when the entry carries none. A created
// revision above rev is impossible for an entry that Client.Put wrote and
// would let a hand-written entry take a route it never held: refused.
func parseAPIAt(key string, doc []byte, rev uint64) (*API, error) {
	a, err := ParseAPI(key, doc)
	if err != nil {
		return nil, err
	}
	if a.Created > rev {
		return nil, &ValidationError{Key: key, Problems: []schemas.Problem{{Path: "created_revision",
			Message: fmt.Sprintf("must not be above the entry's own revision (%d)", rev)}}}
	}
	a.Revision = rev
	if a.Created == 0 {
		a.Created = rev
	}
	return a, nil
}

// decodeFields decodes each top-level field on its own, so one bad field
// does not hide the others. It returns the problems of fields whose own
// decoder explains them (durations, sizes); plain JSON type mismatches are
// left to the schema, which names them better.
func (a *API) decodeFields(js []byte) (ps []schemas.Problem, failed map[string]bool) {
	failed = map[string]bool{}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(js, &raw); err != nil {
		return nil, failed // the schema reports a document that is not an object
	}
	fields := map[string]any{
		"name": &a.Name, "pool": &a.Pool, "description": &a.Description, "owner": &a.Owner,
		"route": &a.Route, "backend": &a.Backend, "channels": &a.Channels, "channel_policy": &a.ChannelPolicy, "release": &a.Release, "timeout": &a.Timeout,
		"concurrency": &a.Concurrency, "max_body": &a.MaxBody,
		"rate_limits": &a.RateLimits, "edge_concurrency": &a.EdgeConcurrency,
		"breaker": &a.Breaker, "retry": &a.Retry, "fallback": &a.Fallback, "ip_rules": &a.IPRules,
		"auth": &a.Auth, "validate": &a.Validate, "cache": &a.Cache, "rewrite": &a.Rewrite, "classify": &a.Classify, "cases": &a.Cases, "async": &a.Async, "sandbox": &a.Sandbox, "created_revision": &a.Created,
	}
	// Absent fields are reported once, by the schema ("missing property").
	for k := range fields {
		if _, ok := raw[k]; !ok && k != "backend" && k != "channels" { // one of the two is required: checkChannels says which
			failed[k] = true
		}
	}
	for _, sub := range [][2]string{{"route", "path"}, {"backend", "type"}, {"backend", "url"}} {
		var m map[string]json.RawMessage
		if json.Unmarshal(raw[sub[0]], &m) != nil || m[sub[1]] == nil {
			failed[sub[0]+"."+sub[1]] = true
		}
	}
	for k, v := range raw {
		dst, ok := fields[k]
		if !ok {
			continue // the schema reports unknown fields
		}
		err := json.Unmarshal(v, dst)
		if err != nil {
			failed[k] = true
		}
		var te *json.UnmarshalTypeError
		var se *json.SyntaxError
		if err != nil && !errors.As(err, &te) && !errors.As(err, &se) {
			ps = append(ps, schemas.Problem{Path: k, Message: err.Error()})
		}
	}
	return ps, failed
}

// mergeProblems keeps every semantic problem and the schema problems at
// paths the semantic checks did not already explain (their messages are
// friendlier than a schema pattern).
func mergeProblems(semantic, schema []schemas.Problem) []schemas.Problem {
	explained := map[string]bool{}
	for _, p := range semantic {
		explained[p.Path] = true
	}
	out := semantic
	for _, p := range schema {
		if !explained[p.Path] {
			out = append(out, p)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// defaultGRPCRoute gives a grpc backend's route without a path the path
// gRPC itself calls the method on: POST /package.Service/Method.
func (a *API) defaultGRPCRoute() {
	if a.Route.Path != "" || a.Backend.Type != BackendGRPC || !grpcMethod.MatchString(a.Backend.Method) {
		return
	}
	a.Route.Path = "/" + a.Backend.Method
	if a.Route.Method == "" {
		a.Route.Method = http.MethodPost
	}
}

func (a *API) applyDefaults() {
	if a.Route.Method == "" {
		a.Route.Method = http.MethodGet
	}
	a.Route.Host = routeHost(a.Route.Host)
	if a.Timeout == 0 {
		a.Timeout = Duration(DefaultTimeout)
	}
	if a.Concurrency == 0 {
		a.Concurrency = DefaultConcurrency
	}
	if a.MaxBody == 0 {
		a.MaxBody = DefaultMaxBody
	}
	a.Backend.applyDefaults()
	for i := range a.Channels {
		a.Channels[i].Backend.applyDefaults()
	}
	if a.Async != nil {
		a.Async.applyDefaults(a.Timeout)
	}
	if a.Cache != nil {
		a.Cache.applyDefaults()
	}
	if a.Sandbox != nil {
		a.Sandbox.applyDefaults(a)
	}
}

// check returns the semantic problems the schema cannot express.
func (a *API) check(key string) []schemas.Problem {
	var ps []schemas.Problem
	add := func(path, format string, args ...any) {
		ps = append(ps, schemas.Problem{Path: path, Message: fmt.Sprintf(format, args...)})
	}
	if err := bus.ValidName(a.Name); err != nil {
		add("name", "%v", err)
	} else if key != "" && key != a.Name {
		add("name", "must equal the key it is stored under (%q)", key)
	} else if strings.HasPrefix(a.Name, DraftPrefix) {
		add("name", "must not begin with %q: drafts are kept under that prefix (jetway api put --draft)", DraftPrefix)
	}
	if a.draft && !a.Auth.Requires() {
		// Only sandbox apps call a draft, and only an authenticated app
		// is one.
		add("auth.methods", "a draft needs key, hmac, jwt or mtls: only apps marked sandbox call drafts")
	}
	if err := bus.ValidName(a.Pool); err != nil {
		add("pool", "%v", err)
	}
	if a.Owner != "" {
		if err := CheckOwner(a.Owner); err != nil {
			add("owner", "%v", err)
		}
	}
	params, catchAll, err := parseRoutePath(a.Route.Path)
	if err != nil {
		add("route.path", "%v", err)
	} else if strings.HasPrefix(a.Route.Path+"/", BuiltinPrefix) {
		// The edge serves these paths itself, before any route (a route
		// with a parameter first, or a catch-all, never gets them).
		add("route.path", "must not be under %s: the edge serves its own endpoints there (push)", BuiltinPrefix)
	}
	if a.Route.Host != "" {
		if err := CheckRouteHost(routeHost(a.Route.Host)); err != nil {
			add("route.host", "%v", err)
		}
	}
	checkTimeout("timeout", a.Timeout, add)
	if a.MaxBody > MaxMaxBody {
		add("max_body", "must be at most %v (the NATS max payload, 8MiB, less 64KiB for headers)", MaxMaxBody)
	}
	a.checkChannels(params, catchAll, add) // the backend, or the channels
	a.checkRelease(add)
	a.checkPolicies(params, add)
	a.Validate.check("validate", add)
	a.Cache.check("cache", add)
	a.Rewrite.check("rewrite", params, catchAll, add)
	checkHostRewrite("rewrite.request.host", a.Rewrite, a.Backend.Type, add)
	for _, c := range a.Channels {
		checkHostRewrite("rewrite.request.host", a.Rewrite, c.Backend.Type, add)
	}
	a.Classify.check("classify", add)
	checkCases(a.Cases, add)
	a.Async.check("async", add)
	a.Cache.checkWithRewrite("rewrite", a.Rewrite, add)
	if a.Sandbox != nil {
		a.Sandbox.check(params, catchAll, add)
		checkHostRewrite("sandbox.rewrite.request.host", cmp.Or(a.Sandbox.Rewrite, a.Rewrite), a.Sandbox.Backend.Type, add)
		if sb := a.Sandbox; sb.Cache != nil || sb.Rewrite != nil {
			cmp.Or(sb.Cache, a.Cache).checkWithRewrite("sandbox.rewrite", cmp.Or(sb.Rewrite, a.Rewrite), add)
		}
		if !a.Auth.Requires() {
			// Only an authenticated app can be a sandbox app: on an open
			// API the tier could never be reached.
			add("auth.methods", "an API with a sandbox tier needs key, hmac or jwt: sandbox calls are those of apps marked sandbox")
		}
	}
	return ps
}

// checkTimeout adds the problem of a timeout field at path, if any.
func checkTimeout(path string, d Duration, add func(path, format string, args ...any)) {
	if d < 0 || time.Duration(d) > MaxTimeout {
		add(path, "must be between 1ms and %v", MaxTimeout)
	} else if d != 0 && time.Duration(d) < time.Millisecond {
		add(path, "must be at least 1ms")
	}
}

func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte("\"(),/:;<=>?@[\\]{}", c) >= 0 {
			return false
		}
	}
	return true
}

// routeHost is a route's host as stored: lower case, no trailing dot.
func routeHost(h string) string { return strings.ToLower(strings.TrimSuffix(h, ".")) }

// CheckRouteHost checks a route's host: a DNS name of letters, digits and
// hyphens (labels of 1 to 63, 253 in all, no port, no IP address), or
// "*." before one with at least two labels (*.example.com; never *.com).
func CheckRouteHost(h string) error {
	name, wild := strings.CutPrefix(h, "*.")
	if len(name) == 0 || len(name) > 253 {
		return fmt.Errorf("%q is not a host name", h)
	}
	labels := strings.Split(name, ".")
	if wild && len(labels) < 2 {
		return fmt.Errorf("%q: a wildcard covers the names under a domain of two labels at least (*.example.com)", h)
	}
	allDigits := true
	for _, l := range labels {
		if len(l) == 0 || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return fmt.Errorf("%q is not a host name (empty, long or hyphen-edged label %q)", h, l)
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			switch {
			case c >= 'a' && c <= 'z', c == '-':
				allDigits = false
			case c >= '0' && c <= '9':
			default:
				return fmt.Errorf("%q is not a host name: %q (letters, digits, '-' and '.' only; no port, no upper case)", h, string(c))
			}
		}
	}
	if allDigits {
		return fmt.Errorf("%q is an IP address, not a host name", h)
	}
	return nil
}

// parseRoutePath checks a route path pattern and returns its parameter
// names and whether it ends in a catch-all ("/*").
//
// A pattern is "/" followed by segments separated by "/": literal segments
// of URL path characters, whole-segment parameters "{name}", and an optional
// final "*". Dot segments and empty segments (other than one trailing slash)
// are refused so that one request path can only ever match one way.
func parseRoutePath(p string) (params []string, catchAll bool, err error) {
	if !strings.HasPrefix(p, "/") {
		return nil, false, fmt.Errorf(`must start with "/"`)
	}
	if p == "/" {
		return nil, false, nil
	}
	segs := strings.Split(p[1:], "/")
	seen := map[string]bool{}
	for i, s := range segs {
		last := i == len(segs)-1
		switch {
		case s == "" && last:
			// trailing slash: a distinct literal route
		case s == "":
			return nil, false, fmt.Errorf("must not contain empty segments (%q)", p)
		case s == "*":
			if !last {
				return nil, false, fmt.Errorf(`"*" is only allowed as the last segment`)
			}
			catchAll = true
		case s[0] == '{':
			name := strings.TrimSuffix(s[1:], "}")
			if !strings.HasSuffix(s, "}") || !validParamName(name) {
				return nil, false, fmt.Errorf("parameter segment %q must be {name} with name of letters, digits and '_'", s)
			}
			if seen[name] {
				return nil, false, fmt.Errorf("parameter {%s} appears twice", name)
			}
			seen[name] = true
			params = append(params, name)
		case s == "." || s == "..":
			return nil, false, fmt.Errorf("must not contain dot segments")
		default:
			for j := 0; j < len(s); j++ {
				if !pathChar(s[j]) {
					return nil, false, fmt.Errorf("segment %q has a character not allowed in a path (%q)", s, s[j])
				}
			}
		}
	}
	return params, catchAll, nil
}

func validParamName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// pathChar reports RFC 3986 pchar characters, without '%' (literal route
// segments are matched against the canonical path, in which these are
// never escaped), without '{', '}' and '*', which have meaning in patterns,
// and without ';', which the edge refuses in request paths (servlet
// containers read it as path parameters), so a route with it would never
// match.
func pathChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("-._~!$&'()+,=:@", c) >= 0
}

// checkBackendURL checks an http backend URL template: absolute http(s),
// and every placeholder a parameter of the route.
func checkBackendURL(raw string, params []string, catchAll bool) error {
	names, err := templateNames(raw)
	if err != nil {
		return err
	}
	for _, n := range names {
		if n == "*" {
			if !catchAll {
				return fmt.Errorf(`uses {*} but the route path has no "/*"`)
			}
			continue
		}
		if n == RequestPathPlaceholder {
			at := strings.Index(raw, "{"+n+"}")
			if q := strings.IndexByte(raw, '?'); q >= 0 && q < at {
				return fmt.Errorf("{%s} belongs in the path, not the query", n)
			}
			if at == 0 || raw[at-1] != '/' {
				return fmt.Errorf("{%s} stands for the request path without its first /: put it after a / (http://host/{%s})", n, n)
			}
			continue
		}
		found := false
		for _, p := range params {
			found = found || p == n
		}
		if !found {
			return fmt.Errorf("uses {%s}, which is not a parameter of the route path", n)
		}
	}
	// Check the URL with placeholders replaced by a harmless token.
	probe := raw
	for _, n := range names {
		probe = strings.ReplaceAll(probe, "{"+n+"}", "x")
	}
	u, err := url.Parse(probe)
	if err != nil {
		return fmt.Errorf("is not a valid URL: %v", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("must be an http:// or https:// URL")
	}
	if u.Host == "" {
		return fmt.Errorf("must name a host")
	}
	if u.User != nil {
		return fmt.Errorf("must not carry credentials")
	}
	if u.Fragment != "" {
		return fmt.Errorf("must not have a fragment")
	}
	if strings.Contains(u.Host, "{") || strings.Contains(u.RawQuery, "{") {
		return fmt.Errorf("placeholders are only allowed in the path")
	}
	return nil
}

// templateNames lists the {name} placeholders of a template, in order.
func templateNames(t string) ([]string, error) {
	var names []string
	for {
		i := strings.IndexByte(t, '{')
		if i < 0 {
			if strings.IndexByte(t, '}') >= 0 {
				return nil, fmt.Errorf("has an unmatched '}'")
			}
			return names, nil
		}
		if strings.IndexByte(t[:i], '}') >= 0 {
			return nil, fmt.Errorf("has an unmatched '}'")
		}
		j := strings.IndexByte(t[i:], '}')
		if j < 0 {
			return nil, fmt.Errorf("has an unclosed '{'")
		}
		n := t[i+1 : i+j]
		if n != "*" && n != RequestPathPlaceholder && !validParamName(n) {
			return nil, fmt.Errorf("placeholder {%s} is not a valid name", n)
		}
		names = append(names, n)
		t = t[i+j+1:]
	}
}

// Marshal returns the canonical JSON of an entry (defaults filled in).
func (a *API) Marshal() []byte {
	b, _ := json.Marshal(a)
	return b
}

// MaxOwnerLen bounds an API's owner, in characters.
const MaxOwnerLen = 64

// Unowned is the owner SLA reports give an API whose entry names none; no
// entry may name it.
const Unowned = "unowned"

// CheckOwner reports an owner an API entry (or a report schedule) cannot
// name: 1 to 64 printable characters (letters, digits, punctuation,
// spaces), without control characters or a leading or trailing space,
// and not "unowned", which reports use for the APIs without one.
func CheckOwner(owner string) error {
	switch {
	case owner == "":
		return errors.New("must not be empty")
	case !utf8.ValidString(owner):
		return errors.New("must be UTF-8")
	case utf8.RuneCountInString(owner) > MaxOwnerLen:
		return fmt.Errorf("must be at most %d characters", MaxOwnerLen)
	case strings.TrimSpace(owner) != owner:
		return errors.New("must not begin or end with a space")
	case strings.EqualFold(owner, Unowned):
		return fmt.Errorf("%q is what reports call the APIs without an owner: leave the field out", Unowned)
	}
	for _, r := range owner {
		if !unicode.IsPrint(r) && r != ' ' {
			return fmt.Errorf("must be printable: no control characters, tabs or line breaks (got %q)", owner)
		}
	}
	return nil
}
