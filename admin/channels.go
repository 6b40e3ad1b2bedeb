package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/resilience"
)

// Channel sets and gray release (docs/channels.md): what `jetway channel
// list|show|history` and `jetway release status --json` show, for a
// viewer; an operator's overrides (cut, hold, restore) and release
// commands, through the request's registry client so the audit trail
// names the token (kinds channel and release). The overrides are merged
// by compare-and-set in the registry, one channel at a time, so a write
// names no revision: two operators never lose each other's override.

// maxReason bounds the reason kept with an override or a command.
const maxReason = 1024

// ChannelView is one channel of an API's set as GET
// /v1/apis/{name}/channels lists it (a line of `jetway channel list`):
// the entry's weight and backup, the stored status, and the operator's
// override in force. A channel no controller has judged yet is available
// at share 1.
type ChannelView struct {
	Name     string                    `json:"name"`
	Weight   int                       `json:"weight"`
	Backup   bool                      `json:"backup"`
	State    resilience.ChannelState   `json:"state"`
	Share    float64                   `json:"share"`
	Since    time.Time                 `json:"since,omitzero"`
	Reason   string                    `json:"reason,omitempty"`
	Fails    int                       `json:"fails"`
	Round    uint64                    `json:"round"`
	Manual   resilience.ChannelState   `json:"manual,omitempty"`
	ProbeAt  time.Time                 `json:"probe_at,omitzero"`
	Judged   bool                      `json:"judged"` // false: no controller has stored a status for it yet
	Override *registry.ChannelOverride `json:"override,omitempty"`
}

// ChannelsView is GET /v1/apis/{name}/channels: `jetway channel show`
// (policy with its defaults, the stored state and its revision, the
// overrides) with the channels in the entry's order.
type ChannelsView struct {
	API       string                              `json:"api"`
	Pool      string                              `json:"pool"`
	Channels  []ChannelView                       `json:"channels"`
	Policy    registry.ChannelPolicy              `json:"policy"`
	State     *registry.ChannelStateEntry         `json:"state"`
	Revision  uint64                              `json:"revision,omitempty"`
	Overrides map[string]registry.ChannelOverride `json:"overrides"`
	// Release says the entry has a release block (GET /v1/apis/{name}/release).
	Release bool `json:"release"`
}

// ReleaseView is GET /v1/apis/{name}/release: `jetway release status
// --json`, with the last command an operator sent (the controller
// applies each once; state.command names the last applied).
type ReleaseView struct {
	API     string                     `json:"api"`
	Canary  string                     `json:"canary"`
	State   *resilience.ReleaseState   `json:"state"` // null: no controller has stepped it yet (pending)
	History []resilience.ReleaseEvent  `json:"history"`
	Command *resilience.ReleaseCommand `json:"command,omitempty"`
}

// OverrideSet answers PUT /v1/apis/{name}/channels/{channel}/override.
type OverrideSet struct {
	API      string                   `json:"api"`
	Channel  string                   `json:"channel"`
	Override registry.ChannelOverride `json:"override"`
}

// ReleaseSent answers POST /v1/apis/{name}/release (202): the command's
// id, which the release's state names once the controller applied it.
type ReleaseSent struct {
	API      string `json:"api"`
	Action   string `json:"action"`
	Command  string `json:"command"`
	Location string `json:"location"`
}

// getChannels answers an API's channels, overrides and policy; the ETag
// is the stored state's revision (none before a controller wrote one).
func (s *Server) getChannels(w http.ResponseWriter, r *http.Request) {
	api, ok := switchAPI(w, r)
	if !ok {
		return
	}
	cv, err := s.c.ChannelView(r.Context(), api)
	if err != nil {
		writeChannelError(w, err, s)
		return
	}
	st, a, ov := cv.State, cv.API, cv.Overrides
	v := ChannelsView{API: a.Name, Pool: a.Pool, Policy: a.ChannelPolicy.WithDefaults(), State: st,
		Overrides: ov.Channels, Release: a.Release != nil, Channels: make([]ChannelView, 0, len(a.Channels))}
	for _, ch := range a.Channels {
		cv := ChannelView{Name: ch.Name, Weight: ch.WeightOrDefault(), Backup: ch.Backup,
			State: resilience.ChannelAvailable, Share: 1, Reason: "no controller has judged it yet"}
		if cs := st.Channel(ch.Name); cs != nil {
			cv.State, cv.Share, cv.Since, cv.Reason, cv.Fails, cv.Round, cv.Manual, cv.ProbeAt, cv.Judged =
				cs.State, cs.Share, cs.Since, cs.Reason, cs.Fails, cs.Round, cs.Manual, cs.ProbeAt, true
		}
		if o, ok := ov.Channels[ch.Name]; ok {
			cv.Override = &o
		}
		v.Channels = append(v.Channels, cv)
	}
	if st != nil {
		v.Revision = st.Revision
		w.Header().Set("ETag", etag(st.Revision))
	}
	writeJSON(w, http.StatusOK, v)
}

// channelHistory answers the transitions the bucket still holds (its
// last 64 state revisions), oldest first.
func (s *Server) channelHistory(w http.ResponseWriter, r *http.Request) {
	api, ok := switchAPI(w, r)
	if !ok {
		return
	}
	trans, err := s.c.ChannelHistory(r.Context(), api)
	if err != nil {
		writeChannelError(w, err, s)
		return
	}
	if trans == nil {
		trans = []resilience.ChannelTransition{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": trans})
}

// putChannelOverride holds a channel cut or available until DELETE,
// whatever the controller sees (the last channel of a scenario too: the
// operator decides).
func (s *Server) putChannelOverride(w http.ResponseWriter, r *http.Request) {
	api, ok := switchAPI(w, r)
	if !ok {
		return
	}
	var in struct {
		State  resilience.ChannelState `json:"state"`
		Reason string                  `json:"reason"`
	}
	if !readStrict(w, r, &in, `the body is {"state": "cut" or "available", "reason": "<why, optional>"}`) {
		return
	}
	if in.State != resilience.ChannelCut && in.State != resilience.ChannelAvailable {
		writeJSON(w, http.StatusBadRequest, apiError{Code: "BAD_REQUEST", Message: "an override holds a channel cut or available",
			Problems: []problem{{Path: "state", Message: `must be "cut" or "available", not ` + strconv.Quote(string(in.State))}}})
		return
	}
	if !reasonFits(w, in.Reason) {
		return
	}
	channel, ok := s.knownChannel(w, r, api)
	if !ok {
		return
	}
	c := s.client(w, r)
	if err := c.SetChannelOverride(r.Context(), api, channel, in.State, in.Reason); err != nil {
		writeChannelError(w, err, s)
		return
	}
	out := OverrideSet{API: api, Channel: channel,
		Override: registry.ChannelOverride{State: in.State, By: actor(r), Reason: in.Reason, At: time.Now().UTC()}}
	// The override as stored, when it reads back (the write stands either way).
	if cv, err := s.c.ChannelView(r.Context(), api); err == nil {
		if o, ok := cv.Overrides.Channels[channel]; ok {
			out.Override = o
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// deleteChannelOverride gives a channel back to the controller: one held
// cut probes at once, one held available is judged again from a new
// window; on a channel without an override it changes nothing.
func (s *Server) deleteChannelOverride(w http.ResponseWriter, r *http.Request) {
	api, ok := switchAPI(w, r)
	if !ok {
		return
	}
	channel, ok := s.knownChannel(w, r, api)
	if !ok {
		return
	}
	if err := s.client(w, r).ClearChannelOverride(r.Context(), api, channel); err != nil {
		writeChannelError(w, err, s)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// getRelease answers an API's release: its canary, the stored state, the
// changes the bucket still holds and the last command sent.
func (s *Server) getRelease(w http.ResponseWriter, r *http.Request) {
	api, ok := switchAPI(w, r)
	if !ok {
		return
	}
	cv, err := s.c.ChannelView(r.Context(), api)
	if err != nil {
		writeChannelError(w, err, s)
		return
	}
	st, a, ov := cv.State, cv.API, cv.Overrides
	if a.Release == nil {
		writeNoRelease(w, api)
		return
	}
	hist, err := s.c.ReleaseHistory(r.Context(), api)
	if err != nil {
		writeChannelError(w, err, s)
		return
	}
	v := ReleaseView{API: a.Name, Canary: a.Release.Canary, History: hist, Command: ov.Release}
	if v.History == nil {
		v.History = []resilience.ReleaseEvent{}
	}
	if st != nil {
		v.State = st.Release
		w.Header().Set("ETag", etag(st.Revision))
	}
	writeJSON(w, http.StatusOK, v)
}

// postRelease sends an operator's command to an API's release: 202, the
// controller applies it within a second or two (GET the release).
func (s *Server) postRelease(w http.ResponseWriter, r *http.Request) {
	api, ok := switchAPI(w, r)
	if !ok {
		return
	}
	var in struct {
		Action string `json:"action"`
		Reason string `json:"reason"`
	}
	if !readStrict(w, r, &in, `the body is {"action": "start", "pause", "resume", "promote" or "rollback", "reason": "<why, optional>"}`) {
		return
	}
	if !slices.Contains(resilience.ReleaseActions, in.Action) {
		writeJSON(w, http.StatusBadRequest, apiError{Code: "BAD_REQUEST", Message: "not a release command",
			Problems: []problem{{Path: "action", Message: "must be start, pause, resume, promote or rollback, not " + strconv.Quote(in.Action)}}})
		return
	}
	if !reasonFits(w, in.Reason) {
		return
	}
	a, ok := s.channelEntry(w, r, api)
	if !ok {
		return
	}
	if a.Release == nil {
		writeNoRelease(w, api)
		return
	}
	id, err := s.client(w, r).SendRelease(r.Context(), api, in.Action, in.Reason)
	if err != nil {
		writeChannelError(w, err, s)
		return
	}
	loc := "/v1/apis/" + url.PathEscape(api) + "/release"
	w.Header().Set("Location", loc)
	writeJSON(w, http.StatusAccepted, ReleaseSent{API: api, Action: in.Action, Command: id, Location: loc})
}

// channelEntry reads an API's production entry and checks it has
// channels; false when it answered the request (404 for none).
func (s *Server) channelEntry(w http.ResponseWriter, r *http.Request, api string) (*registry.API, bool) {
	e, err := s.c.Get(r.Context(), api)
	if err != nil {
		writeChannelError(w, err, s)
		return nil, false
	}
	a, err := registry.ParseAPI(api, e.Value)
	if err != nil {
		writeChannelError(w, err, s)
		return nil, false
	}
	if !a.HasChannels() {
		writeChannelError(w, fmt.Errorf("api %s: %w", api, registry.ErrNoChannels), s)
		return nil, false
	}
	return a, true
}

// knownChannel is the path's {channel}, a channel of the API's entry;
// false when it answered the request (404 for an API without channels or
// a channel it does not list).
func (s *Server) knownChannel(w http.ResponseWriter, r *http.Request, api string) (string, bool) {
	a, ok := s.channelEntry(w, r, api)
	if !ok {
		return "", false
	}
	channel := chi.URLParam(r, "channel")
	if !slices.ContainsFunc(a.Channels, func(ch registry.Channel) bool { return ch.Name == channel }) {
		writeError(w, http.StatusNotFound, "NOT_FOUND", "api "+api+" has no channel "+strconv.Quote(channel))
		return "", false
	}
	return channel, true
}

// writeChannelError is writeRegistryError, with an API without channels
// a 404.
func writeChannelError(w http.ResponseWriter, err error, s *Server) {
	if errors.Is(err, registry.ErrNoChannels) {
		writeError(w, http.StatusNotFound, "NOT_FOUND", err.Error()+": channel sets are an entry's channels (docs/channels.md)")
		return
	}
	writeRegistryError(w, err, s.log)
}

func writeNoRelease(w http.ResponseWriter, api string) {
	writeError(w, http.StatusNotFound, "NOT_FOUND", "api "+api+" has no release block: add one to its entry (docs/channels.md)")
}

// readStrict decodes a bounded JSON body into v, refusing unknown fields
// and trailing data; false when it answered the request (400 with shape,
// 413).
func readStrict(w http.ResponseWriter, r *http.Request, v any, shape string) bool {
	doc, ok := readBody(w, r)
	if !ok {
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil || dec.More() {
		msg := shape
		if err != nil {
			msg += ": " + err.Error()
		}
		writeError(w, http.StatusBadRequest, "BAD_REQUEST", msg)
		return false
	}
	return true
}

// reasonFits answers 400 for a reason over maxReason bytes.
func reasonFits(w http.ResponseWriter, reason string) bool {
	if len(reason) <= maxReason {
		return true
	}
	writeJSON(w, http.StatusBadRequest, apiError{Code: "BAD_REQUEST", Message: "the reason is too long",
		Problems: []problem{{Path: "reason", Message: fmt.Sprintf("at most %d bytes", maxReason)}}})
	return false
}

// actor is the request's principal as the audit trail names it.
func actor(r *http.Request) string {
	p, _ := r.Context().Value(principalKey{}).(principal)
	return p.actor
}
