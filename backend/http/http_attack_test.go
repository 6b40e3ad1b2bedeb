package httpbackend

import (
	"testing"

	"github.com/jetway-gw/jetway/backend"
)

// A placeholder in the backend URL's query takes a route parameter, which
// is a path segment: '&', '=' and '+' are plain characters there (and the
// edge's canonical path writes %26, %3D, %2B as them). Inserted as they are
// after '?', a caller's /items/1%26tenant=evil would add a query parameter
// of its own choosing to the backend call (here overriding the template's
// fixed tenant for backends that read the last value). In the query, the
// value is escaped for the query.
func TestURLTemplateQueryPlaceholderEscaped(t *testing.T) {
	for _, tc := range []struct {
		tmpl, params, want string
	}{
		{"http://h/items?tenant=acme&id={id}", "id=1%26tenant%3Devil", "http://h/items?tenant=acme&id=1%26tenant%3Devil"},
		{"http://h/s?q={q}", "q=a%2520b%2Bc", "http://h/s?q=a+b%2Bc"},
		{"http://h/s/{q}?q={q}", "q=a%26b", "http://h/s/a&b?q=a%26b"}, // the path keeps the path form
		{"http://h/f?p={*}", "%2A=a%2Fb", "http://h/f?p=a%2Fb"},
	} {
		u := compileURL(tc.tmpl)
		if got := u.expand(&backend.Request{RawParams: tc.params}); got != tc.want {
			t.Errorf("%s with %q = %q, want %q", tc.tmpl, tc.params, got, tc.want)
		}
	}
}
