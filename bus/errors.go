package bus

import (
	"encoding/json"
	"net/http"
)

// Code is a stable machine-readable error code of a gateway-made error.
// Callers see it in the JSON body ({"code": ...}); workers send it to edges
// in the HdrError header. A backend's own error responses never carry one.
type Code string

// The error codes a caller can see. Their HTTP statuses are fixed (Status).
const (
	CodeRouteNotFound    Code = "ROUTE_NOT_FOUND"
	CodeMethodNotAllowed Code = "METHOD_NOT_ALLOWED"
	CodeUnauthenticated  Code = "UNAUTHENTICATED"
	CodeForbidden        Code = "FORBIDDEN"
	CodeNoSandbox        Code = "NO_SANDBOX"
	CodeRateLimited      Code = "RATE_LIMITED"
	CodeDegraded         Code = "DEGRADED"
	CodeCircuitOpen      Code = "CIRCUIT_OPEN"
	CodeNoWorkers        Code = "NO_WORKERS"
	CodeOverloaded       Code = "OVERLOADED"
	CodeBusUnavailable   Code = "BUS_UNAVAILABLE"
	CodeGatewayTimeout   Code = "GATEWAY_TIMEOUT"
	CodeBadGateway       Code = "BAD_GATEWAY"
	CodeBadRequest       Code = "BAD_REQUEST"
	CodeInvalidRequest   Code = "INVALID_REQUEST"
	CodeFaultInjected    Code = "FAULT_INJECTED"
	CodePayloadTooLarge  Code = "PAYLOAD_TOO_LARGE"
	CodeInternal         Code = "INTERNAL"
	CodeWireVersion      Code = "WIRE_VERSION"
	CodeTopicNotFound    Code = "TOPIC_NOT_FOUND"
	CodeJobNotFound      Code = "JOB_NOT_FOUND"
	CodeConflict         Code = "CONFLICT"
	CodeBusLost          Code = "BUS_LOST"
)

var codeStatus = map[Code]int{
	CodeRouteNotFound:    http.StatusNotFound,
	CodeMethodNotAllowed: http.StatusMethodNotAllowed,
	CodeUnauthenticated:  http.StatusUnauthorized,
	CodeForbidden:        http.StatusForbidden,
	CodeNoSandbox:        http.StatusForbidden,
	CodeRateLimited:      http.StatusTooManyRequests,
	CodeDegraded:         http.StatusServiceUnavailable,
	CodeCircuitOpen:      http.StatusServiceUnavailable,
	CodeNoWorkers:        http.StatusServiceUnavailable,
	CodeOverloaded:       http.StatusServiceUnavailable,
	CodeBusUnavailable:   http.StatusServiceUnavailable,
	CodeGatewayTimeout:   http.StatusGatewayTimeout,
	CodeBadGateway:       http.StatusBadGateway,
	CodeBadRequest:       http.StatusBadRequest,
	CodeInvalidRequest:   http.StatusBadRequest,
	CodeFaultInjected:    http.StatusServiceUnavailable,
	CodePayloadTooLarge:  http.StatusRequestEntityTooLarge,
	CodeInternal:         http.StatusInternalServerError,
	CodeWireVersion:      http.StatusBadGateway,
	CodeTopicNotFound:    http.StatusNotFound,
	CodeJobNotFound:      http.StatusNotFound,
	CodeConflict:         http.StatusConflict,
	CodeBusLost:          http.StatusBadGateway,
}

// Status is the HTTP status of a code (500 for an unknown one).
func (c Code) Status() int {
	if s, ok := codeStatus[c]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// Error is a gateway-made error: a code and a human message.
type Error struct {
	Code    Code
	Message string
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Errorf is a shorthand for &Error{code, message}.
func Errorf(code Code, message string) *Error { return &Error{Code: code, Message: message} }

type errorBody struct {
	Code      Code   `json:"code"`
	Message   string `json:"message"`
	RequestID string `json:"request_id,omitempty"`
}

// ErrorJSON is the body a caller receives for a gateway-made error:
// {"code":"…","message":"…","request_id":"…"}.
func ErrorJSON(code Code, message, requestID string) []byte {
	b, _ := json.Marshal(errorBody{Code: code, Message: message, RequestID: requestID})
	return append(b, '\n') // a terminal shows the next prompt on a line of its own
}
