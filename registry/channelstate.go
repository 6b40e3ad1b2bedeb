package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/resilience"
)

// BucketChannels holds what the channel sets' controllers decided, their
// leases and the operators' overrides, under three keys per API:
//
//	state.<pool>.<api>   the channels' states (ChannelStateEntry), written by the elected controller
//	lease.<pool>.<api>   the controller's lease (ChannelLease), taken and renewed by compare-and-set
//	manual.<pool>.<api>  the operators' overrides (ChannelOverrides), written by the admin only
//
// The pool (bus.PoolToken) is in every key, so a worker's NATS user
// writes the states and leases of its own pools' APIs only. Every state
// write is a revision: the bucket's history is the channel history.
const BucketChannels = bus.BucketChannels

// channelHistory is how many revisions of each key the bucket keeps (the
// most JetStream KV allows): `jetway channel history` reads them.
const channelHistory = 64

// ChannelsMaxBytes bounds the channels bucket: a worker that writes keys
// of made-up APIs (its pool's prefix lets it) fills this, never the
// storage the registry, nonces and jobs share.
const ChannelsMaxBytes = 64 << 20

// OpenChannels opens (or creates) the channels bucket. Its stream is made
// by hand, to deny what a KV bucket allows: a rollup (Nats-Rollup: all on
// a state key, which a pool's workers may write, would wipe every pool's
// states and the operators' overrides), and deletes and purges by the
// API; and bounded (ChannelsMaxBytes, new writes refused when full).
func OpenChannels(ctx context.Context, js jetstream.JetStream, o BucketOptions) (jetstream.KeyValue, error) {
	if kv, err := js.KeyValue(ctx, BucketChannels); err == nil {
		return kv, nil
	} else if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("opening bucket %s: %w", BucketChannels, err)
	}
	err := createPushStream(ctx, js, jetstream.StreamConfig{
		Name:              "KV_" + BucketChannels,
		Description:       "Jetway: channel sets' states, controller leases and manual overrides",
		Subjects:          []string{"$KV." + BucketChannels + ".>"},
		MaxMsgsPerSubject: channelHistory,
		MaxBytes:          ChannelsMaxBytes,
		MaxMsgSize:        maxChannelEntry,
		Discard:           jetstream.DiscardNew,
		AllowDirect:       true,
		DenyDelete:        true,
		DenyPurge:         true,
		Duplicates:        2 * time.Minute,
		Storage:           jetstream.FileStorage,
		Replicas:          max(o.Replicas, 1),
	})
	if err != nil {
		return nil, err
	}
	return js.KeyValue(ctx, BucketChannels)
}

// Kinds of key in BucketChannels.
const (
	ChannelKeyState  = "state"
	ChannelKeyLease  = "lease"
	ChannelKeyManual = "manual"
)

// ChannelKey is the key of kind (ChannelKeyState, ...) of an API in pool.
func ChannelKey(kind, pool, api string) string {
	return kind + "." + bus.PoolToken(pool) + "." + api
}

// ParseChannelKey splits a key of BucketChannels; ok is false for a key
// of another shape.
func ParseChannelKey(key string) (kind, poolToken, api string, ok bool) {
	kind, rest, ok1 := strings.Cut(key, ".")
	poolToken, api, ok2 := strings.Cut(rest, ".")
	ok = ok1 && ok2 && api != "" && poolToken != "" &&
		(kind == ChannelKeyState || kind == ChannelKeyLease || kind == ChannelKeyManual)
	return kind, poolToken, api, ok
}

// ChannelStateEntry is the stored state of an API's channels: what the
// controller decided last, and the changes that revision made.
type ChannelStateEntry struct {
	API         string                         `json:"api"`
	Leader      string                         `json:"leader"` // the node whose controller wrote it
	At          time.Time                      `json:"at"`
	Channels    []resilience.ChannelStatus     `json:"channels"`
	Transitions []resilience.ChannelTransition `json:"transitions,omitempty"`
	// Release is the gray release's state, and ReleaseEvents the changes
	// this revision made to it (an API with a release block).
	Release       *resilience.ReleaseState  `json:"release,omitempty"`
	ReleaseEvents []resilience.ReleaseEvent `json:"release_events,omitempty"`
	// Revision is the KV revision the entry was read at (not stored).
	Revision uint64 `json:"-"`
}

// Channel returns the named channel's status (nil when it has none).
func (e *ChannelStateEntry) Channel(name string) *resilience.ChannelStatus {
	if e == nil {
		return nil
	}
	for i := range e.Channels {
		if e.Channels[i].Name == name {
			return &e.Channels[i]
		}
	}
	return nil
}

// maxChannelEntry bounds a stored channel entry read back: a worker never
// parses more (the bucket's max value size says the same).
const maxChannelEntry = 64 << 10

// ParseChannelState reads a stored state. States with unknown names are
// refused: what a worker routes by must mean what it says.
func ParseChannelState(b []byte) (*ChannelStateEntry, error) {
	if len(b) > maxChannelEntry {
		return nil, fmt.Errorf("channel state of %d bytes: at most %d", len(b), maxChannelEntry)
	}
	var e ChannelStateEntry
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, fmt.Errorf("channel state: %w", err)
	}
	for i := range e.Channels {
		c := &e.Channels[i]
		if !channelName.MatchString(c.Name) {
			return nil, fmt.Errorf("channel state: %q is not a channel name", c.Name)
		}
		c.Reason = printable(c.Reason)
		switch c.State {
		case resilience.ChannelAvailable, resilience.ChannelCut, resilience.ChannelProbing, resilience.ChannelRamping:
		default:
			return nil, fmt.Errorf("channel state: channel %q in unknown state %q", c.Name, c.State)
		}
		if c.Share < 0 || c.Share > 1 {
			return nil, fmt.Errorf("channel state: channel %q has share %v, outside 0..1", c.Name, c.Share)
		}
	}
	if r := e.Release; r != nil && (r.Percent < 0 || r.Percent > 100) {
		return nil, fmt.Errorf("channel state: release at %v %%, outside 0..100", r.Percent)
	}
	if r := e.Release; r != nil {
		r.Reason = printable(r.Reason)
	}
	for i := range e.Transitions {
		e.Transitions[i].Reason = printable(e.Transitions[i].Reason)
	}
	for i := range e.ReleaseEvents {
		e.ReleaseEvents[i].Reason = printable(e.ReleaseEvents[i].Reason)
	}
	return &e, nil
}

// ChannelLease is the controller's lease of an API: the node that holds
// it and until when. Another node takes it, by compare-and-set on the
// revision it read, only once Until has passed.
type ChannelLease struct {
	Node  string    `json:"node"`
	Until time.Time `json:"until"`
}

// ChannelOverrides are the operators' overrides of an API's channels.
type ChannelOverrides struct {
	Channels map[string]ChannelOverride `json:"channels"`
	// Release is the operator's last command to the API's release.
	Release *resilience.ReleaseCommand `json:"release,omitempty"`
}

// ChannelOverride is one operator's override: the state the channel is
// held in (cut or available), by whom, why and since when.
type ChannelOverride struct {
	State  resilience.ChannelState `json:"state"`
	By     string                  `json:"by"`
	Reason string                  `json:"reason,omitempty"`
	At     time.Time               `json:"at"`
}

// States is the overrides as StepChannels takes them.
func (o *ChannelOverrides) States() map[string]resilience.ChannelState {
	if o == nil || len(o.Channels) == 0 {
		return nil
	}
	out := make(map[string]resilience.ChannelState, len(o.Channels))
	for name, c := range o.Channels {
		if c.State == resilience.ChannelCut || c.State == resilience.ChannelAvailable {
			out[name] = c.State
		}
	}
	return out
}

// ErrNoChannels is returned for an API that has no channel set.
var ErrNoChannels = errors.New("the api has no channels")

// channelsKV opens the channels bucket for the client.
func (c *Client) channelsKV(ctx context.Context) (jetstream.KeyValue, error) {
	return OpenChannels(ctx, c.js, BucketOptions{Replicas: c.replicas})
}

// channelKV returns the production entry of an API with channels and the
// channels bucket.
func (c *Client) channelKV(ctx context.Context, name string) (*API, jetstream.KeyValue, error) {
	a, err := c.channelAPI(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	kv, err := c.channelsKV(ctx)
	return a, kv, err
}

// channelAPI returns the production entry of an API with channels.
func (c *Client) channelAPI(ctx context.Context, name string) (*API, error) {
	e, err := c.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	a, err := parseAPIAt(name, e.Value, e.Revision)
	if err != nil {
		return nil, err
	}
	if !a.HasChannels() {
		return nil, fmt.Errorf("api %s: %w", name, ErrNoChannels)
	}
	return a, nil
}

// ChannelState reads the stored state of an API's channels (nil, nil
// when no controller has written one yet) and the API's entry.
func (c *Client) ChannelState(ctx context.Context, name string) (*ChannelStateEntry, *API, error) {
	a, kv, err := c.channelKV(ctx, name)
	if err != nil {
		return nil, a, err
	}
	st, err := readState(ctx, kv, a)
	return st, a, err
}

// ChannelView is what is stored of an API's channel set: its entry, the
// state the controller decided (nil before one did) and the operators'
// overrides (empty when none).
type ChannelView struct {
	API       *API
	State     *ChannelStateEntry
	Overrides *ChannelOverrides
}

// ChannelView reads an API's entry, its channels' state and the
// overrides: what `jetway channel list|show` and the admin API show.
func (c *Client) ChannelView(ctx context.Context, name string) (*ChannelView, error) {
	a, kv, err := c.channelKV(ctx, name)
	if err != nil {
		return nil, err
	}
	st, err := readState(ctx, kv, a)
	if err != nil {
		return nil, err
	}
	o, _, err := readOverrides(ctx, kv, a)
	if err != nil {
		return nil, err
	}
	return &ChannelView{API: a, State: st, Overrides: o}, nil
}

// readState reads the stored state of a's channels (nil when none).
func readState(ctx context.Context, kv jetstream.KeyValue, a *API) (*ChannelStateEntry, error) {
	e, err := kv.Get(ctx, ChannelKey(ChannelKeyState, a.Pool, a.Name))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	st, err := ParseChannelState(e.Value())
	if err != nil {
		return nil, err
	}
	st.Revision = e.Revision()
	return st, nil
}

func readOverrides(ctx context.Context, kv jetstream.KeyValue, a *API) (*ChannelOverrides, uint64, error) {
	e, err := kv.Get(ctx, ChannelKey(ChannelKeyManual, a.Pool, a.Name))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return &ChannelOverrides{Channels: map[string]ChannelOverride{}}, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	var o ChannelOverrides
	if err := json.Unmarshal(e.Value(), &o); err != nil {
		return nil, 0, fmt.Errorf("overrides of api %s: %w", a.Name, err)
	}
	if o.Channels == nil {
		o.Channels = map[string]ChannelOverride{}
	}
	return &o, e.Revision(), nil
}

// SetChannelOverride holds an API's channel in state (cut or available)
// until ClearChannelOverride, whatever the controller sees; it is
// written by compare-and-set, so two operators never lose each other's
// override. reason is kept with it.
func (c *Client) SetChannelOverride(ctx context.Context, name, channel string, state resilience.ChannelState, reason string) error {
	if state != resilience.ChannelCut && state != resilience.ChannelAvailable {
		return fmt.Errorf("an override holds a channel cut or available, not %q", state)
	}
	action := "cut"
	if state == resilience.ChannelAvailable {
		action = "hold"
	}
	rev, err := c.overrideChannel(ctx, name, channel, func(o *ChannelOverrides) {
		o.Channels[channel] = ChannelOverride{State: state, By: c.actor, Reason: reason, At: time.Now().UTC()}
	})
	return c.noted(ctx, "channel", action, name+"/"+channel, rev, err)
}

// SendRelease sends an operator's command (resilience.ReleaseStart,
// ReleasePause, ...) to an API's release; the controller applies it
// within a second or two. It returns the command's id.
func (c *Client) SendRelease(ctx context.Context, name, action, reason string) (string, error) {
	if !slices.Contains(resilience.ReleaseActions, action) {
		return "", fmt.Errorf("a release takes %s, not %q", strings.Join(resilience.ReleaseActions, ", "), action)
	}
	a, err := c.channelAPI(ctx, name)
	if err != nil {
		return "", err
	}
	if a.Release == nil {
		return "", fmt.Errorf("api %s has no release block: add one to its entry (docs/channels.md)", name)
	}
	cmd := &resilience.ReleaseCommand{ID: nuid.Next(), Action: action, By: c.actor, Reason: reason, At: time.Now().UTC()}
	rev, err := c.editOverrides(ctx, a, func(o *ChannelOverrides) { o.Release = cmd })
	return cmd.ID, c.noted(ctx, "release", action, name, rev, err)
}

// ClearChannelOverride gives an API's channel back to the controller.
func (c *Client) ClearChannelOverride(ctx context.Context, name, channel string) error {
	rev, err := c.overrideChannel(ctx, name, channel, func(o *ChannelOverrides) { delete(o.Channels, channel) })
	return c.noted(ctx, "channel", "restore", name+"/"+channel, rev, err)
}

// overrideChannel edits the override of one channel of an API.
func (c *Client) overrideChannel(ctx context.Context, name, channel string, edit func(*ChannelOverrides)) (uint64, error) {
	a, err := c.channelAPI(ctx, name)
	if err != nil {
		return 0, err
	}
	if !slices.ContainsFunc(a.Channels, func(ch Channel) bool { return ch.Name == channel }) {
		return 0, fmt.Errorf("api %s has no channel %q", name, channel)
	}
	return c.editOverrides(ctx, a, edit)
}

// editOverrides edits an API's overrides by compare-and-set, again if
// another operator's edit came first.
func (c *Client) editOverrides(ctx context.Context, a *API, edit func(*ChannelOverrides)) (uint64, error) {
	name := a.Name
	kv, err := c.channelsKV(ctx)
	if err != nil {
		return 0, err
	}
	key := ChannelKey(ChannelKeyManual, a.Pool, a.Name)
	for attempt := 0; ; attempt++ {
		o, rev, err := readOverrides(ctx, kv, a)
		if err != nil {
			return 0, err
		}
		edit(o)
		b, _ := json.Marshal(o)
		if rev == 0 {
			rev, err = kv.Create(ctx, key, b)
		} else {
			rev, err = kv.Update(ctx, key, b, rev)
		}
		if err == nil {
			return rev, nil
		}
		if attempt == 4 || !(errors.Is(err, jetstream.ErrKeyExists) || isWrongLastSeq(err)) {
			return 0, fmt.Errorf("writing the overrides of api %s: %w", name, err)
		}
	}
}

// ChannelHistory returns the transitions of an API's channels the
// bucket still holds (its last 64 state revisions), oldest first.
func (c *Client) ChannelHistory(ctx context.Context, name string) ([]resilience.ChannelTransition, error) {
	states, err := c.stateHistory(ctx, name)
	var out []resilience.ChannelTransition
	for _, st := range states {
		out = append(out, st.Transitions...)
	}
	return out, err
}

// ReleaseHistory returns the changes of an API's release the bucket
// still holds (its last 64 state revisions), oldest first.
func (c *Client) ReleaseHistory(ctx context.Context, name string) ([]resilience.ReleaseEvent, error) {
	states, err := c.stateHistory(ctx, name)
	var out []resilience.ReleaseEvent
	for _, st := range states {
		out = append(out, st.ReleaseEvents...)
	}
	return out, err
}

// stateHistory reads the kept revisions of an API's state key, oldest
// first (an unreadable one is skipped).
func (c *Client) stateHistory(ctx context.Context, name string) ([]*ChannelStateEntry, error) {
	a, kv, err := c.channelKV(ctx, name)
	if err != nil {
		return nil, err
	}
	entries, err := kv.History(ctx, ChannelKey(ChannelKeyState, a.Pool, a.Name))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []*ChannelStateEntry
	for _, e := range entries {
		if st, err := ParseChannelState(e.Value()); err == nil {
			out = append(out, st)
		}
	}
	return out, nil
}

// OutcomeReport is a batch of late outcomes of an API's channel calls, as
// an edge takes it (POST /_jetway/outcomes/<api>) and passes it to the
// API's pool (bus.ChannelOutcomeSubject).
type OutcomeReport struct {
	Outcomes []Outcome `json:"outcomes"`
	App      string    `json:"app,omitempty"` // set by the edge: the app that reported
}

// Outcome is one call's late outcome: the call's id (its X-Request-Id),
// the channel that served it (X-Jetway-Channel), and whether it
// succeeded in the end.
type Outcome struct {
	CallID  string `json:"call_id"`
	Channel string `json:"channel"`
	OK      bool   `json:"ok"`
}

// MaxOutcomes bounds the outcomes of one report, MaxOutcomeBody its size
// as an edge takes it.
const (
	MaxOutcomes    = 1000
	MaxOutcomeBody = 96 << 10
)

// printable drops the control characters of a text a worker wrote, which
// a terminal (jetway channel list) would otherwise obey.
func printable(s string) string {
	if !strings.ContainsFunc(s, unicode.IsControl) {
		return s
	}
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, s)
}
