package registry

import (
	"errors"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/jetway-gw/jetway/schemas"
)

func TestRouteShapeAndOverlaps(t *testing.T) {
	if a, b := (Route{Path: "/a/{id}/b/{x}"}).Shape(), (Route{Path: "/a/{oid}/b/{y}"}).Shape(); a != b || a != "/a/{}/b/{}" {
		t.Errorf("Shape: %q vs %q", a, b)
	}
	for _, c := range []struct {
		a, b Route
		want bool
	}{
		{Route{"GET", "/v1/hello/{name}", ""}, Route{"GET", "/v1/hello/{x}", ""}, true},
		{Route{"GET", "/v1/hello/{name}", ""}, Route{"POST", "/v1/hello/{x}", ""}, false},
		// The router gives a "*" route every method, over one added before.
		{Route{"GET", "/v1/hello/{name}", ""}, Route{"*", "/v1/hello/{x}", ""}, true},
		{Route{"*", "/v1/hello/{name}", ""}, Route{"DELETE", "/v1/hello/{name}", ""}, true},
		{Route{"GET", "/v1/hello/{name}", ""}, Route{"GET", "/v1/hello/world", ""}, false}, // literal beats parameter
		{Route{"GET", "/v1/hello/{name}", ""}, Route{"GET", "/v1/hello/*", ""}, false},     // parameter beats catch-all
		{Route{"GET", "/v1/hello", ""}, Route{"GET", "/v1/hello/", ""}, false},
		{Route{"GET", "/v1/{a}/x", ""}, Route{"GET", "/v1/{b}/y", ""}, false},
		// A host splits routes: an exact host wins over a wildcard, any
		// host over none.
		{Route{"GET", "/v1/x", "a.example.com"}, Route{"GET", "/v1/x", "a.example.com"}, true},
		{Route{"GET", "/v1/x", "a.example.com"}, Route{"GET", "/v1/x", "b.example.com"}, false},
		{Route{"GET", "/v1/x", "a.example.com"}, Route{"GET", "/v1/x", "*.example.com"}, false},
		{Route{"GET", "/v1/x", "a.example.com"}, Route{"GET", "/v1/x", ""}, false},
	} {
		if got := c.a.Overlaps(c.b); got != c.want {
			t.Errorf("%v overlaps %v = %v, want %v", c.a, c.b, got, c.want)
		}
		if got := c.b.Overlaps(c.a); got != c.want {
			t.Errorf("%v overlaps %v = %v, want %v (not symmetric)", c.b, c.a, got, c.want)
		}
	}
}

func api(name, method, path string, created, rev uint64) *API {
	return &API{Name: name, Route: Route{Method: method, Path: path}, Created: created, Revision: rev}
}

// The first created keeps the route, whatever its current revision.
func TestConflictsByCreatedRevision(t *testing.T) {
	owner := api("demo.hello", "GET", "/v1/hello/{name}", 3, 40) // edited many times since
	dup := api("dup.hello", "GET", "/v1/hello/{x}", 7, 7)
	anyM := api("any.hello", "*", "/v1/hello/{y}", 9, 9)
	post := api("post.hello", "POST", "/v1/hello/{z}", 2, 2)
	got := Conflicts([]*API{anyM, dup, post, owner})
	want := map[string]string{"dup.hello": "demo.hello", "any.hello": "post.hello"}
	if !maps.Equal(got, want) {
		t.Fatalf("Conflicts = %v, want %v", got, want)
	}
	// Input order does not matter.
	if got := Conflicts([]*API{owner, post, dup, anyM}); !maps.Equal(got, want) {
		t.Fatalf("Conflicts (reordered) = %v, want %v", got, want)
	}
}

func TestCheckRoutes(t *testing.T) {
	owner := api("demo.hello", "GET", "/v1/hello/{name}", 3, 5)
	other := api("other", "GET", "/v1/other", 10, 12)
	raw := api("dup.hello", "GET", "/v1/hello/{x}", 20, 20) // written straight into KV
	inForce := map[string]*API{owner.Name: owner, other.Name: other, raw.Name: raw}
	edit := func(a *API, path string) *API {
		n := *a
		n.Route.Path, n.Revision = path, math.MaxUint64
		return &n
	}
	fresh := func(name, method, path string) *API {
		return api(name, method, path, math.MaxUint64, math.MaxUint64)
	}
	for _, c := range []struct {
		what   string
		next   *API
		holder string // "" when the write is allowed
	}{
		{"the holder's edit", edit(owner, "/v1/hello/{name}"), ""},
		{"the holder renames its parameter", edit(owner, "/v1/hello/{who}"), ""},
		{"a new api on a held route", fresh("dup2", "GET", "/v1/hello/{y}"), "demo.hello"},
		{"a new any-method api over a held route", fresh("dup3", "*", "/v1/hello/{y}"), "demo.hello"},
		{"a new api on another method", fresh("post", "POST", "/v1/hello/{y}"), ""},
		{"the unrouted api's edit", edit(raw, "/v1/hello/{x}"), "demo.hello"},
		{"the unrouted api moves away", edit(raw, "/v1/dup"), ""},
		// Older than other, but other holds /v1/other now: no takeover.
		{"an older api moves onto a held route", edit(owner, "/v1/other"), "other"},
	} {
		err := checkRoutes(inForce, c.next)
		var rc *RouteConflictError
		switch {
		case c.holder == "" && err != nil:
			t.Errorf("%s: refused: %v", c.what, err)
		case c.holder != "" && !errors.As(err, &rc):
			t.Errorf("%s: err = %v, want a *RouteConflictError", c.what, err)
		case c.holder != "" && (rc.HeldBy != c.holder || rc.API != c.next.Name || !strings.Contains(err.Error(), "held by api "+c.holder)):
			t.Errorf("%s: %+v (%v), want held by %s", c.what, rc, err, c.holder)
		}
	}
}

func TestWithCreated(t *testing.T) {
	in := []byte(`{"name":"a", "created_revision": 4,"route":{"path":"/a"},"x":[1,2]}`)
	for _, c := range []struct {
		created uint64
		want    string
	}{
		{0, `{"name":"a","route":{"path":"/a"},"x":[1,2]}`},
		{9, `{"name":"a","route":{"path":"/a"},"x":[1,2],"created_revision":9}`},
	} {
		got, err := withCreated(in, c.created)
		if err != nil || string(got) != c.want {
			t.Errorf("withCreated(%d) = %s, %v; want %s", c.created, got, err, c.want)
		}
	}
	if _, err := withCreated([]byte(`[1]`), 1); err == nil {
		t.Error("withCreated accepted an array")
	}
}

// A created revision is read from the entry, defaults to the entry's own
// revision, and can never be above it.
func TestParseAPIAtCreated(t *testing.T) {
	doc := func(extra string) []byte {
		return []byte(`{"name":"a","pool":"p","route":{"path":"/a"},"backend":{"type":"mock"}` + extra + `}`)
	}
	a, err := parseAPIAt("a", doc(""), 5)
	if err != nil || a.Created != 5 || a.Revision != 5 {
		t.Fatalf("no created_revision: %+v, %v", a, err)
	}
	if a, err = parseAPIAt("a", doc(`,"created_revision":2`), 5); err != nil || a.Created != 2 {
		t.Fatalf("created_revision 2: %+v, %v", a, err)
	}
	_, err = parseAPIAt("a", doc(`,"created_revision":6`), 5)
	var ve *ValidationError
	if !errors.As(err, &ve) || !slices.ContainsFunc(ve.Problems, func(p schemas.Problem) bool { return p.Path == "created_revision" }) {
		t.Fatalf("created_revision above the revision: %v", err)
	}
	for _, bad := range []string{`,"created_revision":0`, `,"created_revision":"3"`, `,"created_revision":-1`} {
		if _, err := ParseAPI("a", doc(bad)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

func TestCheckRouteHost(t *testing.T) {
	for _, ok := range []string{"api.example.com", "*.example.com", "localhost", "a-b.c1.example", "*.a.b.example.com", "x1.123"} {
		if err := CheckRouteHost(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "*.", "*.com", "*", "a.*.com", "api.example.com:443", "Api.example.com", "10.0.0.1",
		"-a.example.com", "a..example.com", "a_b.example.com", "exa mple.com", strings.Repeat("a", 64) + ".com", "[::1]"} {
		if err := CheckRouteHost(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
