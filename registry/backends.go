package registry

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/jetway-gw/jetway/bus"
)

// Backend types.
const (
	BackendHTTP = "http"
	BackendMock = "mock"
	BackendNATS = "nats"
	BackendGRPC = "grpc"
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
	BackendNATS: {check: checkNATSBackend, target: func(b *Backend) string { return b.Subject }},
	BackendGRPC: {check: checkGRPCBackend, target: func(b *Backend) string { return b.Target + " " + b.Method }},
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

// RequestPathPlaceholder, in an http backend's URL, stands for the
// request path (as a path rewrite made it) without its first "/".
const RequestPathPlaceholder = "request.path"

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

func checkNATSBackend(path string, b *Backend, _ []string, _ bool, add func(path, format string, args ...any)) {
	check := checkServiceSubject
	if b.Server != nil {
		check = checkRemoteSubject
		if err := CheckSecretName(b.Server.Secret); err != nil {
			add(path+".server.secret", "%v", err)
		}
	}
	if err := check(b.Subject); err != nil {
		add(path+".subject", "%v", err)
	}
	if b.TLS != nil {
		add(path+".tls", "is for http and grpc backends; a nats backend uses the worker's connection")
	}
}

// checkServiceSubject checks the subject of a nats backend: a literal
// subject (no wildcards) under bus.ServicePrefix, the only subjects a
// worker's user may send backend calls to. Jetway's own subjects, the
// server's ($JS, $KV, $SYS) and the inboxes are outside it by construction.
func checkServiceSubject(s string) error {
	if s == "" {
		return fmt.Errorf("is required for nats backends (%s<service>...)", bus.ServicePrefix)
	}
	if !strings.HasPrefix(s, bus.ServicePrefix) || len(s) == len(bus.ServicePrefix) {
		return fmt.Errorf("must start with %q: a worker may call NATS services only there, never Jetway's or the server's own subjects (got %q)", bus.ServicePrefix, s)
	}
	return checkLiteralSubject(s)
}

// checkLiteralSubject checks that s is one subject a message can be sent
// to: at most 255 bytes of non-empty tokens, no wildcard, no space.
func checkLiteralSubject(s string) error {
	if len(s) > 255 {
		return fmt.Errorf("is longer than 255 bytes")
	}
	for tok := range strings.SplitSeq(s, ".") {
		switch {
		case tok == "":
			return fmt.Errorf("has an empty token (%q)", s)
		case tok == "*" || tok == ">":
			return fmt.Errorf("is a wildcard; a backend call goes to one literal subject")
		}
		for i := 0; i < len(tok); i++ {
			if c := tok[i]; c <= ' ' || c == 0x7f {
				return fmt.Errorf("has a space or control character")
			}
		}
	}
	return nil
}

// checkRemoteSubject checks the subject of a nats backend on another NATS
// system: any literal subject but the server's own ($JS, $SYS, $SRV...)
// and the inboxes, which are no service's.
func checkRemoteSubject(s string) error {
	if s == "" {
		return errors.New("is required for nats backends")
	}
	if strings.HasPrefix(s, "$") || strings.HasPrefix(s, "_INBOX.") {
		return fmt.Errorf("is a subject of the server itself or an inbox, not a service's (got %q)", s)
	}
	return checkLiteralSubject(s)
}

// grpcMethod is package.Service/Method: a fully qualified service name
// (dot-separated identifiers) and a method name.
var grpcMethod = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*/[A-Za-z_][A-Za-z0-9_]*$`)

func checkGRPCBackend(path string, b *Backend, _ []string, _ bool, add func(path, format string, args ...any)) {
	if b.Target == "" {
		add(path+".target", "is required for grpc backends (host:port)")
	} else if host, port, err := net.SplitHostPort(b.Target); err != nil || host == "" || !validPort(port) || strings.ContainsAny(host, "/ \t:") && net.ParseIP(host) == nil {
		add(path+".target", "must be host:port (got %q)", b.Target)
	}
	if !grpcMethod.MatchString(b.Method) {
		add(path+".method", "must be package.Service/Method (got %q)", b.Method)
	}
	for i, h := range b.Metadata {
		if !validHeaderName(h) {
			add(fmt.Sprintf("%s.metadata.%d", path, i), "is not a header name")
		} else if l := strings.ToLower(h); strings.HasPrefix(l, "grpc-") || l == "content-type" || l == "te" || l == "user-agent" || strings.HasPrefix(l, ":") {
			add(fmt.Sprintf("%s.metadata.%d", path, i), "is a header gRPC sets itself")
		}
	}
	if t := b.TLS; t != nil && (t.Cert == "") != (t.Key == "") {
		add(path+".tls", "cert_file and key_file come together")
	}
	if b.Schema != "" && !schemaDigest.MatchString(b.Schema) {
		add(path+".schema", "must be sha256:<64 hex digits>, as jetway schema put prints it (got %q)", b.Schema)
	}
}

func validPort(p string) bool {
	n, err := strconv.Atoi(p)
	return err == nil && n > 0 && n < 65536 && p[0] != '+'
}
