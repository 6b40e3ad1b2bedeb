package edge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"slices"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/registry"
)

// Late outcomes of channel calls: a provider confirms some results after
// its answer (an SMS delivery report), and the API's owner passes that on
//
//	POST /_jetway/outcomes/<api>
//	{"outcomes":[{"call_id":"<the call's X-Request-Id>","channel":"<X-Jetway-Channel>","ok":false}]}
//
// authenticated as an app granted the API, as a call of the API would be.
// Each outcome of a call the reporting app made, on the channel that
// served it, counts once as one more call of that channel, failed or
// not, in the window it arrives in (the worker that made the call checks
// that: workers/recentcalls.go); the pool's controller judges it with the
// rest (workers/chancontrol.go). Only APIs that authenticate their
// callers take reports: an open API's channels cannot be judged by
// whoever asks.

func (e *Edge) serveOutcomes(w http.ResponseWriter, r *http.Request, id, api, sent string, addr netip.Addr) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		writeError(w, bus.CodeMethodNotAllowed, "outcome reports are POSTed", id)
		return
	}
	// A report is work like a call: it counts in flight, within the
	// edge's limit, so a flood of reports is refused as calls are.
	n := e.inflight.Add(1)
	defer e.inflight.Add(-1)
	if limit := e.o.MaxInFlight; limit > 0 && n > limit {
		writeError(w, bus.CodeOverloaded, "this edge is serving its limit of requests", id)
		return
	}
	p := e.router.Load().auth[api]
	if p == nil || !p.api.HasChannels() {
		writeError(w, bus.CodeRouteNotFound, "no api "+quoteName(api)+" with channels that authenticates its callers takes outcome reports", id)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, registry.MaxOutcomeBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, bus.CodePayloadTooLarge, fmt.Sprintf("an outcome report is at most %d KiB", registry.MaxOutcomeBody>>10), id)
			return
		}
		writeError(w, bus.CodeBadRequest, "reading the report: "+err.Error(), id)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body)) // a signed report's digest reads it again
	app, err := Authenticate(r, p, Caller{Addr: addr, Path: sent})
	if err != nil {
		writeRefusal(w, asError(err), id)
		return
	}
	var rep registry.OutcomeReport
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		writeError(w, bus.CodeBadRequest, "the report is not {\"outcomes\":[{\"call_id\",\"channel\",\"ok\"}]}: "+err.Error(), id)
		return
	}
	if n := len(rep.Outcomes); n == 0 || n > registry.MaxOutcomes {
		writeError(w, bus.CodeBadRequest, fmt.Sprintf("a report holds 1 to %d outcomes", registry.MaxOutcomes), id)
		return
	}
	for _, o := range rep.Outcomes {
		if !slices.ContainsFunc(p.api.Channels, func(c registry.Channel) bool { return c.Name == o.Channel }) {
			writeError(w, bus.CodeBadRequest, "api "+api+" has no channel "+quoteName(o.Channel), id)
			return
		}
		if o.CallID == "" || len(o.CallID) > 128 {
			writeError(w, bus.CodeBadRequest, "each outcome needs the call's id (its X-Request-Id), at most 128 characters", id)
			return
		}
	}
	rep.App = app.ID
	b, _ := json.Marshal(rep)
	if err := e.o.Conn.Publish(bus.ChannelOutcomeSubject(p.api.Pool, api), b); err != nil {
		writeError(w, bus.CodeBusUnavailable, "the report could not be passed on: "+err.Error(), id)
		return
	}
	_ = writeJSON(w, http.StatusAccepted, map[string]int{"accepted": len(rep.Outcomes)})
}
