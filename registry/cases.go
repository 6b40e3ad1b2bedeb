package registry

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// Case is a saved sample call of an API, stored with its entry: a request
// and what its answer must be. `jetway api test` runs an API's cases
// through a real edge and reports each.
type Case struct {
	Name    string      `json:"name"`
	Request CaseRequest `json:"request"`
	Expect  CaseExpect  `json:"expect"`
}

// CaseRequest is the request of a case. Path is the path as the caller
// sends it (with its query); Body is JSON (sent as application/json
// unless the headers say otherwise) or, as a JSON string, text.
type CaseRequest struct {
	Method  string            `json:"method,omitempty"` // default GET
	Path    string            `json:"path"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    json.RawMessage   `json:"body,omitempty"`
}

// CaseExpect is what the answer of a case must be: its status, these
// headers with exactly these values, and in a JSON body these values at
// these JSON pointers.
type CaseExpect struct {
	Status  int                        `json:"status"`
	Headers map[string]string          `json:"headers,omitempty"`
	Body    map[string]json.RawMessage `json:"body,omitempty"`
}

// MaxCases bounds an API's saved cases.
const MaxCases = 32

func checkCases(cases []Case, add func(path, format string, args ...any)) {
	if len(cases) > MaxCases {
		add("cases", "at most %d cases", MaxCases)
	}
	seen := map[string]bool{}
	for i, c := range cases {
		p := fmt.Sprintf("cases.%d", i)
		if c.Name == "" || seen[c.Name] {
			add(p+".name", "every case has a name of its own")
		}
		seen[c.Name] = true
		if !strings.HasPrefix(c.Request.Path, "/") || strings.ContainsAny(c.Request.Path, " \r\n#") {
			add(p+".request.path", "must be a path starting with / (a query after ?), without spaces or a fragment")
		}
		checkSavedRequest(p+".request", c.Request.Method, c.Request.Headers, add)
		if c.Expect.Status < 100 || c.Expect.Status > 599 {
			add(p+".expect.status", "must be a status from 100 to 599")
		}
		for ptr := range c.Expect.Body {
			if ptr != "" && !strings.HasPrefix(ptr, "/") {
				add(p+".expect.body", "%q is not a JSON pointer (it starts with /, or is \"\" for the whole body)", ptr)
			}
		}
	}
}

// checkSavedRequest checks the method and headers of a request an entry
// saves to send itself (a case, a canned probe): a method among the
// usual ones ("" for GET), header names, and values without CR, LF or
// NUL, which would let a value add a header of its own.
func checkSavedRequest(path, method string, headers map[string]string, add func(path, format string, args ...any)) {
	switch method {
	case "", http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions:
	default:
		add(path+".method", "must be GET, HEAD, POST, PUT, PATCH, DELETE or OPTIONS")
	}
	for k, v := range headers {
		if !validHeaderName(k) || strings.ContainsAny(v, "\r\n\x00") {
			add(path+".headers", "%q: a header name and a value without CR, LF or NUL", k)
		}
	}
}
