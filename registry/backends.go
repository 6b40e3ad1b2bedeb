package registry

import (
	"maps"
	"net/http"
	"slices"
	"strings"
)

// Backend types.
const (
	BackendHTTP = "http"
	BackendMock = "mock"
)

// backendKind is what the registry knows of one backend type: the defaults
// it fills in, the checks the schema cannot express, and what names the
// backend in breaker events and logs. The worker's adapter of the type is
// in backend/<type>; schemas/api.schema.json lists the same types (a test
// keeps them equal).
type backendKind struct {
	defaults func(b *Backend) // nil: none
	// check adds the problems of b at path; params and catchAll describe
	// the route path the backend may take placeholders from.
	check  func(path string, b *Backend, params []string, catchAll bool, add func(path, format string, args ...any))
	target func(b *Backend) string // the backend called, "" for none
}

// backendKinds is the table of backend types, by Backend.Type. A new type
// is one line here and one folder in backend/.
var backendKinds = map[string]backendKind{
	BackendHTTP: {check: checkHTTPBackend, target: func(b *Backend) string { return b.URL }},
	BackendMock: {defaults: mockDefaults, check: checkMockBackend, target: func(*Backend) string { return "" }},
}

// BackendKinds lists the backend types an entry may have, sorted.
func BackendKinds() []string { return slices.Sorted(maps.Keys(backendKinds)) }

// kindList is the types for messages: "grpc, http or mock".
func kindList() string {
	ks := BackendKinds()
	if len(ks) == 1 {
		return ks[0]
	}
	return strings.Join(ks[:len(ks)-1], ", ") + " or " + ks[len(ks)-1]
}

// Label names the backend in breaker events: its type and what it calls
// ("http http://orders:8080/o/{id}").
func (b *Backend) Label() string {
	target := ""
	if k, ok := backendKinds[b.Type]; ok {
		target = k.target(b)
	}
	return b.Type + " " + target
}

func (b *Backend) applyDefaults() {
	if k, ok := backendKinds[b.Type]; ok && k.defaults != nil {
		k.defaults(b)
	}
}

// checkBackend adds the problems of a backend at path; params and catchAll
// describe the route path its URL may take placeholders from.
func checkBackend(path string, b *Backend, params []string, catchAll bool, add func(path, format string, args ...any)) {
	if k, ok := backendKinds[b.Type]; ok {
		k.check(path, b, params, catchAll, add)
		return
	}
	if b.Type == "" {
		add(path+".type", "is required (%s)", kindList())
	} else {
		add(path+".type", "must be %s (got %q)", kindList(), b.Type)
	}
}

func checkHTTPBackend(path string, b *Backend, params []string, catchAll bool, add func(path, format string, args ...any)) {
	if b.URL == "" {
		add(path+".url", "is required for http backends")
	} else if err := checkBackendURL(b.URL, params, catchAll); err != nil {
		add(path+".url", "%v", err)
	}
	if t := b.TLS; t != nil {
		if !strings.HasPrefix(b.URL, "https://") {
			add(path+".tls", "is for an https:// url")
		}
		if (t.Cert == "") != (t.Key == "") {
			add(path+".tls", "cert_file and key_file come together")
		}
	}
}

func mockDefaults(b *Backend) {
	if b.Status == 0 {
		b.Status = http.StatusOK
	}
}

func checkMockBackend(path string, b *Backend, _ []string, _ bool, add func(path, format string, args ...any)) {
	b.Static.check(path, add)
}
