package edge

import (
	"net/http"

	"github.com/jetway-gw/jetway/bus"
)

// writeError answers with a gateway-made error: JSON with a stable code, a
// message and the request id.
func writeError(w http.ResponseWriter, code bus.Code, msg, requestID string) {
	writeErrorStatus(w, code.Status(), code, msg, requestID)
}

// writeErrorStatus is writeError with a status other than the code's own
// (a degrade switch may set one).
func writeErrorStatus(w http.ResponseWriter, status int, code bus.Code, msg, requestID string) {
	markCode(w, code)
	h := w.Header()
	h["Content-Type"] = []string{"application/json"}
	h["Cache-Control"] = []string{"no-store"}
	w.WriteHeader(status)
	_, _ = w.Write(bus.ErrorJSON(code, msg, requestID))
}
