package edge

import "github.com/jetway-gw/jetway/otel"

// channelHeader names the channel of an API's channel set that answered a
// call: the worker sets it on its reply (workers.callChannel).
const channelHeader = "X-Jetway-Channel"

// observeChannel counts a call of an API with a channel set by the
// channel that answered it, with the call's outcome o as observe judged it.
// The name is the worker's to say, so it is counted only if the API's
// entry lists it (as the entry spells it: no string of the reply is kept),
// and as otel.OtherChannel if not. A call no channel answered — refused
// on purpose, failed before any channel's answer, answered by the API's
// fallback, or served from the cache without a call — is not counted.
func (c *call) observeChannel(m *otel.Metrics, o otel.Outcome) {
	rt := c.rt
	if len(rt.api.Channels) == 0 || o == otel.Blocked {
		return
	}
	var h map[string][]string
	switch {
	case c.msg != nil: // the worker's reply
		h = c.msg.Header
	case c.upstream != 0 && c.cacheResult == "": // a stream's head, its headers copied to the response
		h = c.Header()
	}
	v := h[channelHeader]
	if len(v) == 0 || len(h["X-Jetway-Fallback"]) > 0 {
		// No channel answered, or a fallback did: its header, if any, is
		// of an earlier answer (cached) or of another API's channel.
		return
	}
	name := otel.OtherChannel
	for i := range rt.api.Channels {
		if ch := &rt.api.Channels[i]; ch.Name == v[0] {
			name = ch.Name
			break
		}
	}
	// A cached answer that stands in for the worker's reply
	// (stale-if-error) stands in for a failed one.
	failed := o == otel.Failed || c.cacheResult == "hit" || c.cacheResult == "stale"
	m.RecordChannel(rt.key, rt.api.Pool, name, failed)
}
