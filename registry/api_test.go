package registry

import (
	"strings"
	"testing"
	"time"
)

const goodJSON = `{
  "name": "orders.get",
  "pool": "orders",
  "route": {"method": "GET", "path": "/v1/orders/{id}"},
  "backend": {"type": "http", "url": "http://127.0.0.1:9001/orders/{id}"},
  "timeout": "800ms",
  "concurrency": 64,
  "max_body": "1MiB"
}`

func TestParseAPIGood(t *testing.T) {
	a, err := ParseAPI("orders.get", []byte(goodJSON))
	if err != nil {
		t.Fatal(err)
	}
	if a.Name != "orders.get" || a.Pool != "orders" || a.Route.Path != "/v1/orders/{id}" ||
		time.Duration(a.Timeout) != 800*time.Millisecond || a.Concurrency != 64 || a.MaxBody != 1<<20 {
		t.Fatalf("parsed %+v", a)
	}
	if a.Subject() != "jetway.api.orders.orders.get" {
		t.Errorf("subject %q", a.Subject())
	}
}

// The documented ceiling itself is accepted.
func TestParseAPIMaxBodyCeiling(t *testing.T) {
	doc := `{"name":"a","pool":"p","route":{"path":"/a"},"backend":{"type":"mock"},"max_body":"8128KiB"}`
	a, err := ParseAPI("", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if a.MaxBody != 8<<20-64<<10 {
		t.Fatalf("max_body %d, want %d", a.MaxBody, 8<<20-64<<10)
	}
}

func TestParseAPIYAMLAndDefaults(t *testing.T) {
	doc := `
name: status
pool: misc
route:
  path: /status
backend:
  type: mock
  json: {ok: true}
`
	a, err := ParseAPI("", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if a.Route.Method != "GET" || a.TimeoutOrDefault() != DefaultTimeout || a.Concurrency != DefaultConcurrency ||
		a.MaxBody != DefaultMaxBody || a.Backend.Status != 200 || string(a.Backend.JSON) != `{"ok":true}` {
		t.Fatalf("defaults not applied: %+v", a)
	}
}

// TestParseAPIProblems checks that every problem is reported with its path,
// and that the message is the friendly one where we have one.
func TestParseAPIProblems(t *testing.T) {
	for _, tc := range []struct {
		name string
		key  string
		doc  string
		want []string // "path: message substring"
	}{
		{"empty", "", ``, []string{": empty document"}},
		{"not json", "", `{"name":`, []string{": not valid JSON"}},
		{"missing everything", "", `{}`, []string{": missing properties 'name', 'pool'"}},
		{"wildcard name", "", `{"name":"orders.*","pool":"p","route":{"path":"/x"},"backend":{"type":"mock"}}`,
			[]string{"name: must be dot-separated tokens"}},
		{"key mismatch", "other", `{"name":"a","pool":"p","route":{"path":"/x"},"backend":{"type":"mock"}}`,
			[]string{`name: must equal the key it is stored under ("other")`}},
		{"bad path", "", `{"name":"a","pool":"p","route":{"path":"x"},"backend":{"type":"mock"}}`,
			[]string{`route.path: must start with "/"`}},
		{"dot segment", "", `{"name":"a","pool":"p","route":{"path":"/a/../b"},"backend":{"type":"mock"}}`,
			[]string{`route.path: must not contain dot segments`}},
		{"catch-all not last", "", `{"name":"a","pool":"p","route":{"path":"/a/*/b"},"backend":{"type":"mock"}}`,
			[]string{`route.path: "*" is only allowed as the last segment`}},
		{"unknown placeholder", "", `{"name":"a","pool":"p","route":{"path":"/a/{id}"},"backend":{"type":"http","url":"http://h/{oid}"}}`,
			[]string{`backend.url: uses {oid}, which is not a parameter of the route path`}},
		{"http needs url", "", `{"name":"a","pool":"p","route":{"path":"/a"},"backend":{"type":"http"}}`,
			[]string{`backend: missing property 'url'`}},
		{"ftp url", "", `{"name":"a","pool":"p","route":{"path":"/a"},"backend":{"type":"http","url":"ftp://h/x"}}`,
			[]string{`backend.url: must be an http:// or https:// URL`}},
		{"bad type", "", `{"name":"a","pool":"p","route":{"path":"/a"},"backend":{"type":"soap"}}`,
			[]string{`backend.type: must be grpc, http, mock or nats`}},
		{"bad duration and size", "", `{"name":"a","pool":"p","route":{"path":"/a"},"backend":{"type":"mock"},"timeout":"5 parsecs","max_body":"1ZB"}`,
			[]string{`max_body: must be a size like`, `timeout: must be a duration like`}},
		{"limits", "", `{"name":"a","pool":"p","route":{"path":"/a"},"backend":{"type":"mock"},"timeout":"10m","max_body":"64MiB","concurrency":0}`,
			[]string{`concurrency:`, `max_body: must be at most 8128KiB`, `timeout: must be between 1ms and 5m0s`}},
		// The ceiling is the NATS max payload less the headers' room, not
		// the max payload itself: a body of 8MiB could never travel.
		{"max_body 8MiB", "", `{"name":"a","pool":"p","route":{"path":"/a"},"backend":{"type":"mock"},"max_body":"8MiB"}`,
			[]string{`max_body: must be at most 8128KiB (the NATS max payload, 8MiB, less 64KiB for headers)`}},
		{"max_body one byte over", "", `{"name":"a","pool":"p","route":{"path":"/a"},"backend":{"type":"mock"},"max_body":"8323073"}`,
			[]string{`max_body: must be at most 8128KiB`}},
		{"typo field", "", `{"name":"a","pool":"p","route":{"path":"/a"},"backend":{"type":"mock"},"timeuot":"1s"}`,
			[]string{`: additional properties 'timeuot' not allowed`}},
		{"wrong types", "", `{"name":5,"pool":["x"],"route":{"path":"/a"},"backend":{"type":"mock"}}`,
			[]string{`name: got number, want string`, `pool: got array, want string`}},
		{"body and json", "", `{"name":"a","pool":"p","route":{"path":"/a"},"backend":{"type":"mock","body":"x","json":1}}`,
			[]string{`backend: give body or json, not both`}},
		{"grpc needs target and method", "", `{"name":"a","pool":"p","route":{"path":"/a"},"backend":{"type":"grpc"}}`,
			[]string{"backend: missing properties 'target', 'method'"}},
		{"grpc bad target", "", `{"name":"a","pool":"p","route":{"path":"/a"},"backend":{"type":"grpc","target":"http://h:1","method":"a.B/C"}}`,
			[]string{"backend.target: must be host:port"}},
		{"grpc no port", "", `{"name":"a","pool":"p","route":{"path":"/a"},"backend":{"type":"grpc","target":"h","method":"a.B/C"}}`,
			[]string{"backend.target: must be host:port"}},
		{"grpc port not a number", "", `{"name":"a","pool":"p","route":{"path":"/a"},"backend":{"type":"grpc","target":"h:grpc","method":"a.B/C"}}`,
			[]string{"backend.target: must be host:port"}},
		{"grpc port out of range", "", `{"name":"a","pool":"p","route":{"path":"/a"},"backend":{"type":"grpc","target":"h:70000","method":"a.B/C"}}`,
			[]string{"backend.target: must be host:port"}},
		{"grpc bad method", "", `{"name":"a","pool":"p","route":{"path":"/a"},"backend":{"type":"grpc","target":"h:1","method":"a.B.C"}}`,
			[]string{"backend.method: must be package.Service/Method"}},
		{"grpc reserved metadata", "", `{"name":"a","pool":"p","route":{"path":"/a"},"backend":{"type":"grpc","target":"h:1","method":"a.B/C","metadata":["grpc-timeout"]}}`,
			[]string{"backend.metadata.0: is a header gRPC sets itself"}},
		{"nats needs subject", "", `{"name":"a","pool":"p","route":{"path":"/a"},"backend":{"type":"nats"}}`,
			[]string{"backend: missing property 'subject'"}},
		{"nats jetway subject", "", `{"name":"a","pool":"p","route":{"path":"/a"},"backend":{"type":"nats","subject":"jetway.api.p.x"}}`,
			[]string{"backend.subject: must start with \"svc.\""}},
		{"nats kv subject", "", `{"name":"a","pool":"p","route":{"path":"/a"},"backend":{"type":"nats","subject":"$KV.jetway_apps.x"}}`,
			[]string{"backend.subject: must start with"}},
		{"nats inbox subject", "", `{"name":"a","pool":"p","route":{"path":"/a"},"backend":{"type":"nats","subject":"_INBOX.x"}}`,
			[]string{"backend.subject: must start with"}},
		{"nats bare prefix", "", `{"name":"a","pool":"p","route":{"path":"/a"},"backend":{"type":"nats","subject":"svc."}}`,
			[]string{"backend.subject: must start with"}},
		{"nats wildcard", "", `{"name":"a","pool":"p","route":{"path":"/a"},"backend":{"type":"nats","subject":"svc.orders.*"}}`,
			[]string{"backend.subject: is a wildcard"}},
		{"nats full wildcard", "", `{"name":"a","pool":"p","route":{"path":"/a"},"backend":{"type":"nats","subject":"svc.>"}}`,
			[]string{"backend.subject: is a wildcard"}},
		{"nats empty token", "", `{"name":"a","pool":"p","route":{"path":"/a"},"backend":{"type":"nats","subject":"svc..x"}}`,
			[]string{"backend.subject: has an empty token"}},
		{"nats space", "", `{"name":"a","pool":"p","route":{"path":"/a"},"backend":{"type":"nats","subject":"svc.a b"}}`,
			[]string{"backend.subject: has a space"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseAPI(tc.key, []byte(tc.doc))
			ve, ok := err.(*ValidationError)
			if !ok {
				t.Fatalf("got %v, want *ValidationError", err)
			}
			var got []string
			for _, p := range ve.Problems {
				got = append(got, p.Path+": "+p.Message)
			}
			for _, w := range tc.want {
				found := false
				for _, g := range got {
					found = found || strings.HasPrefix(g, w) || (strings.HasPrefix(w, ":") && strings.Contains(g, w))
				}
				if !found {
					t.Errorf("missing problem %q in %q", w, got)
				}
			}
		})
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]Size{
		"0": 0, "65536": 65536, "1KiB": 1024, "1 KiB": 1024, "64KB": 64000, "1MiB": 1 << 20, "2GiB": 2 << 30, "10B": 10,
	} {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "1ZB", "MiB", "1.5MiB", "99999999999999999999"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) succeeded", in)
		}
	}
	if s := Size(1 << 20).String(); s != "1MiB" {
		t.Errorf("String = %s", s)
	}
}

func TestParseRoutePath(t *testing.T) {
	if _, _, err := parseRoutePath("/v1/a:b@c!$&'()+,=-._~"); err != nil {
		t.Errorf("pchar literal refused: %v", err)
	}
	params, catchAll, err := parseRoutePath("/v1/{a}/x/{b_2}/*")
	if err != nil || len(params) != 2 || params[0] != "a" || params[1] != "b_2" || !catchAll {
		t.Fatalf("got %v %v %v", params, catchAll, err)
	}
	for _, bad := range []string{"", "x", "/a//b", "/{a}/{a}", "/{1a}", "/{a", "/a b", "/a%20b", "/.", "/a/*/b", "/{a}x", "/a;b", "/a/..;"} {
		if _, _, err := parseRoutePath(bad); err == nil {
			t.Errorf("parseRoutePath(%q) accepted", bad)
		}
	}
}

func FuzzParseAPI(f *testing.F) {
	f.Add([]byte(goodJSON))
	f.Add([]byte("name: a\npool: b\nroute: {path: /x}\nbackend: {type: mock}\n"))
	f.Add([]byte(`{"name":"a","pool":"p","route":{"path":"/a/{x}/*"},"backend":{"type":"http","url":"http://h/{x}/{*}?q=1"}}`))
	f.Add([]byte(`{"name":"a","pool":"p","route":{"path":"/a/{x}"},"backend":{"type":"mock"},"auth":{"methods":["key"]},"sandbox":{"pool":"sb","backend":{"type":"http","url":"http://sb/{x}"},"rate_limits":[{"limit":1}]}}`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		a, err := ParseAPI("", doc)
		if err != nil {
			if _, ok := err.(*ValidationError); !ok {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		// Whatever passes must be safe to route and to put on NATS.
		if sb := a.SandboxAPI(); sb != nil && (strings.ContainsAny(sb.Subject(), " *>\t\r\n") || sb.Pool == "") {
			t.Fatalf("accepted unsafe sandbox %+v", sb)
		}
		if a.Name == "" || strings.ContainsAny(a.Subject(), " *>\t\r\n") || !strings.HasPrefix(a.Route.Path, "/") {
			t.Fatalf("accepted unsafe entry %+v", a)
		}
		// And it must survive a round trip.
		if _, err := ParseAPI(a.Name, a.Marshal()); err != nil {
			t.Fatalf("round trip of %s failed: %v", a.Marshal(), err)
		}
	})
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"1MiB", "65536", "1 KB", "-1", "9223372036854775807GiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err == nil && n < 0 {
			t.Fatalf("ParseSize(%q) = %d", s, n)
		}
	})
}
