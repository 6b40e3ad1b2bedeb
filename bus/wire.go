package bus

// Header names of the wire between edge and worker. A request travels as NATS
// headers plus the raw body; a reply likewise. Jetway's own headers share the
// reserved prefix HeaderPrefix; every other header of a request is an HTTP
// request header passed to the backend, every other header of a reply an HTTP
// response header passed to the client.
//
// HTTP headers that arrive at the edge with the reserved prefix are dropped,
// so a caller can never forge wire metadata; likewise backend response
// headers with the prefix are dropped by the worker. HTTP headers whose
// names NATS itself reads (Status, Nats-*, ...) travel escaped, see
// EncodeHeaderName.
const (
	HeaderPrefix = "Jetway-"

	// Request metadata, set by the edge.
	HdrMethod    = "Jetway-Method"     // HTTP method
	HdrPath      = "Jetway-Path"       // request path as received (escaped form)
	HdrQuery     = "Jetway-Query"      // raw query string, without '?'
	HdrParams    = "Jetway-Params"     // route parameters, URL-query encoded
	HdrRequestID = "Jetway-Request-Id" // request id, also sent to backends as X-Request-Id
	HdrDeadline  = "Jetway-Deadline"   // absolute deadline, Unix nanoseconds
	HdrApp       = "Jetway-App"        // authenticated app id, if any
	HdrClientIP  = "Jetway-Client-Ip"  // client address as the edge saw it

	// Reply metadata, set by the worker.
	HdrStatus = "Jetway-Status" // HTTP status of the reply
	HdrError  = "Jetway-Error"  // set only on gateway-made errors: the error code

	// HdrTraceparent carries W3C trace context; it is not prefixed so that
	// standard propagators find it.
	HdrTraceparent = "Traceparent"
)

// IsReserved reports whether an HTTP header name (in canonical form) is in
// the reserved wire namespace.
func IsReserved(canonicalName string) bool {
	return len(canonicalName) >= len(HeaderPrefix) && canonicalName[:len(HeaderPrefix)] == HeaderPrefix
}
