package edge

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/schemas"
)

// Error is a gateway-made refusal: what an edge step returns to end a call
// (see steps) and what Authenticate returns. It says everything the
// caller's response carries, so that one place (writeRefusal) writes it,
// whatever the transport: an HTTP response here, a WebSocket close or a
// TCP error frame for a push client.
type Error struct {
	Code    bus.Code
	Status  int // the HTTP status; 0: the code's own (bus.Code.Status)
	Message string
	// RetryAfter, when > 0, is sent as Retry-After: the whole seconds
	// after which a refused caller may try again.
	RetryAfter int64
	// Challenge, when set, is sent as WWW-Authenticate: the credentials
	// the API accepts.
	Challenge string
	// Header holds more headers to send (a degrade switch's own); shared,
	// never modified.
	Header http.Header
	// Problems, when set, are listed in the body: why the request does
	// not match its API's schemas (INVALID_REQUEST).
	Problems []schemas.RequestProblem
	// More counts the problems left out of Problems.
	More int
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// HTTPStatus is the status the refusal is sent with.
func (e *Error) HTTPStatus() int {
	if e.Status != 0 {
		return e.Status
	}
	return e.Code.Status()
}

// retryAfterSecs is a limiter's wait rounded up to whole seconds, at least
// one: what Retry-After says.
func retryAfterSecs(d time.Duration) int64 {
	return max(int64((d+time.Second-1)/time.Second), 1)
}

// asError is err as a refusal; an error that is none (a bug) becomes 500
// INTERNAL, its text kept out of the caller's sight.
func asError(err error) *Error {
	if e, ok := err.(*Error); ok {
		return e
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Code: bus.CodeInternal, Message: "internal error"}
}

// writeRefusal answers with a refusal: its headers, then the JSON error.
func writeRefusal(w http.ResponseWriter, e *Error, requestID string) {
	h := w.Header()
	for k, v := range e.Header {
		h[k] = v
	}
	if e.RetryAfter > 0 {
		h["Retry-After"] = []string{strconv.FormatInt(e.RetryAfter, 10)}
	}
	if e.Challenge != "" {
		h["Www-Authenticate"] = []string{e.Challenge}
	}
	if e.Problems != nil {
		writeProblems(w, e, requestID)
		return
	}
	writeErrorStatus(w, e.HTTPStatus(), e.Code, e.Message, requestID)
}

// problemsBody is the error body of a request that failed validation.
type problemsBody struct {
	Code      bus.Code                 `json:"code"`
	Message   string                   `json:"message"`
	RequestID string                   `json:"request_id,omitempty"`
	Problems  []schemas.RequestProblem `json:"problems"`
	More      int                      `json:"more_problems,omitempty"`
}

func writeProblems(w http.ResponseWriter, e *Error, requestID string) {
	b, _ := json.Marshal(problemsBody{Code: e.Code, Message: e.Message, RequestID: requestID, Problems: e.Problems, More: e.More})
	h := w.Header()
	h["Content-Type"] = []string{"application/json"}
	h["Cache-Control"] = []string{"no-store"}
	w.WriteHeader(e.HTTPStatus())
	_, _ = w.Write(append(b, '\n'))
}

// writeError answers with a gateway-made error: JSON with a stable code, a
// message and the request id.
func writeError(w http.ResponseWriter, code bus.Code, msg, requestID string) {
	writeErrorStatus(w, code.Status(), code, msg, requestID)
}

// writeErrorStatus is writeError with a status other than the code's own
// (a degrade switch may set one).
func writeErrorStatus(w http.ResponseWriter, status int, code bus.Code, msg, requestID string) {
	h := w.Header()
	h["Content-Type"] = []string{"application/json"}
	h["Cache-Control"] = []string{"no-store"}
	w.WriteHeader(status)
	_, _ = w.Write(bus.ErrorJSON(code, msg, requestID))
}
