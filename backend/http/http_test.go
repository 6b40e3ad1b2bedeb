package httpbackend

import (
	"testing"

	"github.com/jetway-gw/jetway/backend"
)

func TestURLTemplate(t *testing.T) {
	for _, tc := range []struct {
		tmpl, params, query, want string
	}{
		{"http://h/x", "", "", "http://h/x"},
		{"http://h/x", "", "a=1", "http://h/x?a=1"},
		{"http://h/x?fixed=1", "", "a=1", "http://h/x?fixed=1&a=1"},
		{"http://h/o/{id}", "id=42", "", "http://h/o/42"},
		{"http://h/o/{id}/i/{item}", "id=a%2520b&item=7", "q=%2F", "http://h/o/a%20b/i/7?q=%2F"},
		{"http://h/files/{*}", "%2A=a%2Fb%2Fc", "", "http://h/files/a/b/c"},
	} {
		u := compileURL(tc.tmpl)
		if got := u.expand(&backend.Request{RawParams: tc.params, RawQuery: tc.query}); got != tc.want {
			t.Errorf("%s with %q %q = %q, want %q", tc.tmpl, tc.params, tc.query, got, tc.want)
		}
	}
}
