package otel

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"github.com/jetway-gw/jetway/bus"
)

// Channel sets (an API served by several backends, its "channels"): the
// edge counts each call by the channel that answered it, and follows the
// changes of the channels' states that the controller of each API's pool
// announces on bus.ChannelEventPrefix+<pool token>.<api>, for the gauges
// of /metrics and the channel_cut alerts.
//
// Both come from outside the edge — the answering channel from a worker's
// reply header, the states from any worker of a pool — so neither is
// believed blindly: the edge counts a channel only under a name its API's
// entry lists (OtherChannel for any other), and an event is dropped unless
// it is small, parses, names a known state and a channel that could be
// one, and its subject's API is its own.

// OtherChannel counts the calls whose answering channel is none of the
// API's channels.
const OtherChannel = "other"

// The states of a channel, as resilience.ChannelState names them.
const (
	ChannelAvailable = "available" // takes its full share
	ChannelCut       = "cut"       // takes nothing
	ChannelProbing   = "probing"   // takes a few probe calls
	ChannelRamping   = "ramping"   // takes a part of its share
)

// channelStates are the known states, in the order /metrics lists them.
var channelStates = [...]string{ChannelAvailable, ChannelCut, ChannelProbing, ChannelRamping}

func knownChannelState(s string) bool { return slices.Contains(channelStates[:], s) }

// Bounds of what channel events may make a node keep.
const (
	// maxChannelEventBytes bounds an event: the controller's are a few
	// hundred bytes (the window's figures included).
	maxChannelEventBytes = 8 << 10
	// maxChannelReason bounds the reason kept of an event.
	maxChannelReason = 512
	// maxChannelsPerAPI bounds the channel names counted or kept per API:
	// an entry lists at most 16 (registry.MaxChannels), and renames over
	// time may add some; past it, names count as OtherChannel (calls) or
	// are ignored (states).
	maxChannelsPerAPI = 32
	// maxChannelStates bounds the channels whose state a node keeps.
	maxChannelStates = 16384
)

// ChannelEvent is one change of a channel's state as the controller of its
// API announced it (a resilience.ChannelTransition with its API).
type ChannelEvent struct {
	API string `json:"api"`
	// PoolToken is the subject's pool token (bus.PoolToken): only the
	// API's own pool's event is to be believed, which the receiver checks
	// against its registry.
	PoolToken string    `json:"-"`
	Channel   string    `json:"channel"`
	From      string    `json:"from"`
	To        string    `json:"to"`
	Share     float64   `json:"share"`
	By        string    `json:"by"` // "controller" or "manual"
	Reason    string    `json:"reason"`
	At        time.Time `json:"at"`
}

// ValidChannelName reports whether s may name a channel (registry's
// rule: [a-z0-9][a-z0-9_-]{0,62}).
func ValidChannelName(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || i > 0 && (c == '_' || c == '-')) {
			return false
		}
	}
	return true
}

// ParseChannelEvent reads a channel event received on subject. It reports
// false for anything a controller does not send: a payload over 8 KB, one
// that does not parse, another kind of event on the subject (a gray
// release's step), a subject outside bus.ChannelEventPrefix or whose API is
// not the event's, an API or channel name no entry can hold, a
// state it does not know (from may be empty) or a share outside [0, 1].
// A reason is cut to 512 bytes, and a "by" that is not a short word is
// dropped.
func ParseChannelEvent(subject string, data []byte) (ChannelEvent, bool) {
	if len(data) > maxChannelEventBytes {
		return ChannelEvent{}, false
	}
	rest, ok := strings.CutPrefix(subject, bus.ChannelEventPrefix)
	if !ok {
		return ChannelEvent{}, false
	}
	tok, api, ok := strings.Cut(rest, ".")
	if !ok || tok == "" || bus.ValidName(strings.ReplaceAll(tok, ":", ".")) != nil {
		return ChannelEvent{}, false
	}
	var ev struct {
		ChannelEvent
		Kind string `json:"kind"` // "release": a gray release's step, on the same subject
	}
	if json.Unmarshal(data, &ev) != nil || ev.Kind != "" || ev.API != api || bus.ValidName(api) != nil || !ValidChannelName(ev.Channel) ||
		!knownChannelState(ev.To) || (ev.From != "" && !knownChannelState(ev.From)) || !(ev.Share >= 0 && ev.Share <= 1) {
		return ChannelEvent{}, false
	}
	ev.PoolToken = tok
	if len(ev.By) > 32 || strings.ContainsFunc(ev.By, func(r rune) bool { return (r < 'a' || r > 'z') && r != '_' && r != '-' }) {
		ev.By = ""
	}
	ev.Reason = clip(ev.Reason, maxChannelReason)
	return ev.ChannelEvent, true
}

// clip cuts s to at most n bytes, at a rune's start.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// FollowChannelEvents subscribes nc to the channel events of every pool
// (an edge's user may) and hands each one ParseChannelEvent accepts to
// observe, on the subscription's goroutine.
func FollowChannelEvents(nc *nats.Conn, observe func(ChannelEvent)) (*nats.Subscription, error) {
	return nc.Subscribe(bus.ChannelEventPrefix+">", func(m *nats.Msg) {
		if ev, ok := ParseChannelEvent(m.Subject, m.Data); ok {
			observe(ev)
		}
	})
}

// Calls by channel.

// channelCounts count one channel's calls of an API.
type channelCounts struct {
	ok, failed atomic.Int64
	// What the last Tick read (Tick's only: it runs on one goroutine).
	tickOK, tickFailed int64
}

// ChannelCalls are a channel's calls in a Record's second.
type ChannelCalls struct {
	Channel string `json:"channel"`
	OK      int64  `json:"ok"`
	Failed  int64  `json:"failed,omitempty"`
}

// RecordChannel counts one call of an API with a channel set by the
// channel that answered it, as the edge judged the call (failed: as
// Record's Failed). The caller passes a name its API's entry lists, or
// OtherChannel; past maxChannelsPerAPI names per API, more count as
// OtherChannel. A channel seen before costs a map read and an atomic add.
func (m *Metrics) RecordChannel(api, pool, channel string, failed bool) {
	a := m.api(api, pool)
	c := (*a.channels.Load())[channel]
	if c == nil {
		if len(*a.channels.Load()) >= maxChannelsPerAPI {
			channel = OtherChannel
		}
		c = cowLookup(&m.mu, &a.channels, channel, func() *channelCounts { return new(channelCounts) })
	}
	if failed {
		c.failed.Add(1)
	} else {
		c.ok.Add(1)
	}
}

// tickChannels returns an API's channel calls since the last tick, by
// channel name; nil when none.
func (a *apiMetrics) tickChannels() []ChannelCalls {
	chans := *a.channels.Load()
	if len(chans) == 0 {
		return nil
	}
	var out []ChannelCalls
	for _, name := range slices.Sorted(maps.Keys(chans)) {
		c := chans[name]
		ok, failed := c.ok.Load(), c.failed.Load()
		if d := (ChannelCalls{Channel: name, OK: ok - c.tickOK, Failed: failed - c.tickFailed}); d.OK+d.Failed > 0 {
			out = append(out, d)
		}
		c.tickOK, c.tickFailed = ok, failed
	}
	return out
}

// Channel states, from the events.

// chanState is a channel's state as last announced.
type chanState struct {
	state string
	share float64
}

// channelView keeps the channels' states as their pools' controllers last
// announced them, by "<pool token>.<api>" and channel.
type channelView struct {
	mu     sync.Mutex
	byAPI  map[string]map[string]chanState
	states int
}

// ObserveChannel takes a channel event (ParseChannelEvent's) for the
// gauges jetway_channel_state and jetway_channel_share. It is kept under
// the event's pool token, and shown only for an API this node has counted
// calls of, in that pool: a worker of another pool cannot speak for it.
func (m *Metrics) ObserveChannel(ev ChannelEvent) {
	if !knownChannelState(ev.To) || !ValidChannelName(ev.Channel) {
		return
	}
	v := &m.chanView
	key := ev.PoolToken + "." + ev.API
	v.mu.Lock()
	defer v.mu.Unlock()
	chans := v.byAPI[key]
	if _, seen := chans[ev.Channel]; !seen {
		if v.states >= maxChannelStates || len(chans) >= maxChannelsPerAPI {
			return
		}
		if chans == nil {
			if v.byAPI == nil {
				v.byAPI = map[string]map[string]chanState{}
			}
			chans = map[string]chanState{}
			v.byAPI[key] = chans
		}
		v.states++
	}
	chans[ev.Channel] = chanState{state: ev.To, share: ev.Share}
}

// writeChannels writes the channel metrics of apis (sorted) in the
// Prometheus text format.
func (m *Metrics) writeChannels(bw *bufio.Writer, apis []*apiMetrics, lbl func(*apiMetrics) string) {
	fmt.Fprintln(bw, "# HELP jetway_channel_requests_total Calls of APIs with a channel set, by the channel that answered (other: a name the API's entry does not list) and outcome (ok, failed: as jetway_requests_failed_total).")
	fmt.Fprintln(bw, "# TYPE jetway_channel_requests_total counter")
	for _, a := range apis {
		chans := *a.channels.Load()
		for _, name := range slices.Sorted(maps.Keys(chans)) {
			c := chans[name]
			fmt.Fprintf(bw, "jetway_channel_requests_total{%s,channel=%q,outcome=\"ok\"} %d\n", lbl(a), name, c.ok.Load())
			fmt.Fprintf(bw, "jetway_channel_requests_total{%s,channel=%q,outcome=\"failed\"} %d\n", lbl(a), name, c.failed.Load())
		}
	}
	v := &m.chanView
	v.mu.Lock()
	type row struct {
		a     *apiMetrics
		name  string
		state chanState
	}
	var rows []row
	for _, a := range apis {
		chans := v.byAPI[bus.PoolToken(a.pool)+"."+a.name]
		for _, name := range slices.Sorted(maps.Keys(chans)) {
			rows = append(rows, row{a, name, chans[name]})
		}
	}
	v.mu.Unlock()
	fmt.Fprintln(bw, "# HELP jetway_channel_state The state of each channel of an API's channel set as its pool's controller last announced it: 1 for the current state (available, cut, probing, ramping), 0 for the others.")
	fmt.Fprintln(bw, "# TYPE jetway_channel_state gauge")
	for _, r := range rows {
		for _, s := range channelStates {
			n := 0
			if s == r.state.state {
				n = 1
			}
			fmt.Fprintf(bw, "jetway_channel_state{%s,channel=%q,state=%q} %d\n", lbl(r.a), r.name, s, n)
		}
	}
	fmt.Fprintln(bw, "# HELP jetway_channel_share The part of its full share of calls each channel takes: 1 available, the ramp step ramping, 0 cut or probing.")
	fmt.Fprintln(bw, "# TYPE jetway_channel_share gauge")
	for _, r := range rows {
		fmt.Fprintf(bw, "jetway_channel_share{%s,channel=%q} %s\n", lbl(r.a), r.name, strconv.FormatFloat(r.state.share, 'g', 6, 64))
	}
}

// Alerts of kind channel_cut.

// channelAlert is a channel's state as the alerts know it.
type channelAlert struct {
	state, by, reason string
	share             float64
	// Who took the channel out and why: the event that ended its last
	// available spell (or the first heard).
	outBy, outReason string
}

// maxAlertChannels bounds the channels whose state the alerts keep.
const maxAlertChannels = 16384

// ObserveChannel takes a channel event (ParseChannelEvent's) for the
// channel_cut rules. The caller believes it only from the API's own pool
// and for a channel its entry lists, as it does breaker events; an event
// of a state the alerts do not know is ignored.
func (a *Alerts) ObserveChannel(ev ChannelEvent) {
	if !knownChannelState(ev.To) || !ValidChannelName(ev.Channel) || bus.ValidName(ev.API) != nil {
		return
	}
	key := ev.API + "/" + ev.Channel
	a.mu.Lock()
	defer a.mu.Unlock()
	st, seen := a.channels[key]
	if !seen && len(a.channels) >= maxAlertChannels {
		return
	}
	if ev.To != ChannelAvailable && (!seen || st.state == ChannelAvailable || ev.To == ChannelCut) {
		st.outBy, st.outReason = ev.By, ev.Reason
	}
	st.state, st.by, st.reason, st.share = ev.To, ev.By, ev.Reason, ev.Share
	a.channels[key] = st
}

// KeepChannels forgets the channels live does not name (gone from their
// API's entry, or the API deleted): a firing alert of one resolves.
func (a *Alerts) KeepChannels(live func(api, channel string) bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for key := range a.channels {
		api, ch, _ := strings.Cut(key, "/")
		if !live(api, ch) {
			delete(a.channels, key)
		}
	}
}

// channelTargets are the channels ("<api>/<channel>") a channel_cut rule
// watches: those heard of its API (every API's for "*"), and those it has
// firing (forgotten since: judged available, so they resolve).
func (a *Alerts) channelTargets(rule, api string) []string {
	var out []string
	for key := range a.channels {
		if name, _, _ := strings.Cut(key, "/"); api == "*" || name == api {
			out = append(out, key)
		}
	}
	for k, on := range a.firing {
		if t, ok := strings.CutPrefix(k, rule+"|"); ok && on && !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return out
}

// judgeChannel is a channel_cut rule's verdict on a target: whether it
// fires, the state (the value) and the message.
func (a *Alerts) judgeChannel(target string) (firing bool, state, msg string) {
	api, ch, _ := strings.Cut(target, "/")
	st, known := a.channels[target]
	switch {
	case !known:
		return false, ChannelAvailable, fmt.Sprintf("channel %s of api %s is no longer in the api's channel set", ch, api)
	case st.state == ChannelAvailable:
		return false, st.state, fmt.Sprintf("channel %s of api %s is available again (%s: %s)", ch, api, who(st.by), st.reason)
	case st.state == ChannelCut:
		return true, st.state, fmt.Sprintf("channel %s of api %s is cut by %s: %s", ch, api, who(st.by), st.reason)
	default:
		return true, st.state, fmt.Sprintf("channel %s of api %s is %s at share %g, not yet available (taken out by %s: %s; now %s: %s)",
			ch, api, st.state, st.share, who(st.outBy), st.outReason, who(st.by), st.reason)
	}
}

// who names the author of a channel change.
func who(by string) string {
	switch by {
	case "controller":
		return "the controller"
	case "manual":
		return "an operator (manual)"
	}
	return cmp.Or(by, "unknown")
}

// Alerts of kind release_rolled_back.

// ReleaseEvent is one change of an API's gray release as its controller
// announced it (a resilience.ReleaseEvent with its API), on the channel
// events' subject with "kind": "release".
type ReleaseEvent struct {
	API       string `json:"api"`
	PoolToken string `json:"-"` // as ChannelEvent's
	Canary    string `json:"canary"`
	From      string `json:"from"`
	To        string `json:"to"`
	By        string `json:"by"`
	Reason    string `json:"reason"`
}

// releaseStages are the stages a release event may name.
var releaseStages = []string{"pending", "running", "paused", "promoted", "rolled_back"}

// ParseReleaseEvent reads a release event received on subject, with the
// bounds of ParseChannelEvent: false for anything else.
func ParseReleaseEvent(subject string, data []byte) (ReleaseEvent, bool) {
	if len(data) > maxChannelEventBytes {
		return ReleaseEvent{}, false
	}
	rest, ok := strings.CutPrefix(subject, bus.ChannelEventPrefix)
	if !ok {
		return ReleaseEvent{}, false
	}
	tok, api, ok := strings.Cut(rest, ".")
	if !ok || tok == "" || bus.ValidName(strings.ReplaceAll(tok, ":", ".")) != nil {
		return ReleaseEvent{}, false
	}
	var msg struct {
		API     string       `json:"api"`
		Kind    string       `json:"kind"`
		Release ReleaseEvent `json:"release"`
	}
	if json.Unmarshal(data, &msg) != nil || msg.Kind != "release" || msg.API != api || bus.ValidName(api) != nil ||
		!ValidChannelName(msg.Release.Canary) || !slices.Contains(releaseStages, msg.Release.To) {
		return ReleaseEvent{}, false
	}
	ev := msg.Release
	ev.API, ev.PoolToken = api, tok
	if len(ev.By) > 32 || strings.ContainsFunc(ev.By, func(r rune) bool { return (r < 'a' || r > 'z') && r != '_' && r != '-' }) {
		ev.By = ""
	}
	ev.Reason = clip(ev.Reason, maxChannelReason)
	return ev, true
}

// FollowReleaseEvents subscribes nc to the release events of every pool
// and hands each one ParseReleaseEvent accepts to observe.
func FollowReleaseEvents(nc *nats.Conn, observe func(ReleaseEvent)) (*nats.Subscription, error) {
	return nc.Subscribe(bus.ChannelEventPrefix+">", func(m *nats.Msg) {
		if ev, ok := ParseReleaseEvent(m.Subject, m.Data); ok {
			observe(ev)
		}
	})
}

// releaseAlert is an API's release as the alerts know it.
type releaseAlert struct{ stage, canary, by, reason string }

// ObserveRelease takes a release event for the release_rolled_back
// rules; the caller believes it only from the API's own pool, for an API
// whose entry has a release.
func (a *Alerts) ObserveRelease(ev ReleaseEvent) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, seen := a.releases[ev.API]; !seen && len(a.releases) >= maxAlertChannels {
		return
	}
	a.releases[ev.API] = releaseAlert{stage: ev.To, canary: ev.Canary, by: ev.By, reason: ev.Reason}
}

// KeepReleases forgets the releases of APIs live does not name (deleted,
// or without a release block now): a firing alert of one resolves.
func (a *Alerts) KeepReleases(live func(api string) bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for api := range a.releases {
		if !live(api) {
			delete(a.releases, api)
		}
	}
}

// releaseTargets are the APIs a release_rolled_back rule watches: those
// heard of (every API's for "*"), and those it has firing.
func (a *Alerts) releaseTargets(rule, api string) []string {
	var out []string
	for name := range a.releases {
		if api == "*" || name == api {
			out = append(out, name)
		}
	}
	for k, on := range a.firing {
		if t, ok := strings.CutPrefix(k, rule+"|"); ok && on && !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return out
}

// judgeRelease is a release_rolled_back rule's verdict on an API.
func (a *Alerts) judgeRelease(api string) (firing bool, stage, msg string) {
	st, known := a.releases[api]
	switch {
	case !known:
		return false, "none", fmt.Sprintf("api %s has no release any more", api)
	case st.stage == "rolled_back":
		return true, st.stage, fmt.Sprintf("the release of api %s (canary %s) was rolled back by %s: %s", api, st.canary, who(st.by), st.reason)
	}
	return false, st.stage, fmt.Sprintf("the release of api %s (canary %s) is %s (%s: %s)", api, st.canary, st.stage, who(st.by), st.reason)
}
