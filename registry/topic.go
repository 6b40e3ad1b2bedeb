package registry

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/schemas"
)

// BucketTopics holds the push topics: key = topic name, value = Topic JSON
// (schemas/topic.schema.json).
const BucketTopics = bus.BucketTopics

// Topic modes.
const (
	// TopicDurable keeps every message for the retention; a publish is
	// answered once the stream has it, with its sequence.
	TopicDurable = "durable"
	// TopicBestEffort is answered before the stream has the message; kept
	// for a short retention (default 5m) for reconnects.
	TopicBestEffort = "best_effort"
	// TopicLatestOnly keeps only the newest message of each address and
	// key: a client that falls behind gets the newest value per key.
	TopicLatestOnly = "latest_only"
)

// Retention bounds.
const (
	DefaultTopicMaxAge      = 72 * time.Hour
	DefaultBestEffortMaxAge = 5 * time.Minute
	MaxTopicMaxAge          = 30 * 24 * time.Hour
	MinTopicMaxAge          = time.Second
	// MaxPushMessage bounds one message's data.
	MaxPushMessage = 1 << 20
)

const (
	topicAuthDefault       = "key"
	topicOriginNull        = "null"
	topicGrantAll          = "*"
	topicGrantPrefixSuffix = ".*"
)

// Topic is a push topic: who may publish to it and subscribe to it, how
// long its messages are kept, and how (docs/push.md).
type Topic struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Publish and Subscribe are the apps that may publish over an edge and
	// subscribe: ids, "prefix.*" or "*". Internal services publish on NATS.
	Publish   []string `json:"publish,omitempty"`
	Subscribe []string `json:"subscribe,omitempty"`
	// Auth is how apps prove who they are: methods among key, hmac and jwt
	// (an app's own issuer); default key.
	Auth *TopicAuth `json:"auth,omitempty"`
	// UserClaim names the claim of a client's JWT that says which user
	// it is (messages to=user reach it; its acks are that user's);
	// default "sub". A token whose claim is not a string names no user.
	UserClaim string `json:"user_claim,omitempty"`
	// Mode: durable (default), best_effort or latest_only.
	Mode string `json:"mode,omitempty"`
	// Retention: how long a message is kept.
	Retention *Retention `json:"retention,omitempty"`
	// Sandbox topics are for sandbox apps only; others for production
	// apps only.
	Sandbox bool `json:"sandbox,omitempty"`
	// Origins are the browser origins (scheme://host[:port]) allowed to
	// connect; a request with any other Origin, "null" included, is
	// refused. None: only clients that send no Origin (not browsers).
	Origins []string `json:"origins,omitempty"`
	// Groups, when set, lets apps consume the topic in groups (one
	// durable queue per app and group name: push/group.go).
	Groups *TopicGroups `json:"groups,omitempty"`

	Revision uint64 `json:"-"`
}

// TopicGroups are a topic's consumer groups.
type TopicGroups struct {
	Names      []string `json:"names"`
	AckWait    Duration `json:"ack_wait,omitempty"`
	MaxDeliver int      `json:"max_deliver,omitempty"`
}

// Group bounds and defaults.
const (
	DefaultGroupAckWait    = 30 * time.Second
	MinGroupAckWait        = time.Second
	MaxGroupAckWait        = time.Hour
	DefaultGroupMaxDeliver = 5
)

// HasGroup reports whether clients may consume the topic in group name.
func (t *Topic) HasGroup(name string) bool {
	return t.Groups != nil && slices.Contains(t.Groups.Names, name)
}

// GroupAckWait is how long a group's delivered message waits for its ack.
func (t *Topic) GroupAckWait() time.Duration {
	if t.Groups != nil && t.Groups.AckWait > 0 {
		return time.Duration(t.Groups.AckWait)
	}
	return DefaultGroupAckWait
}

// GroupMaxDeliver is how many times a group's message is delivered before
// it becomes a dead letter.
func (t *Topic) GroupMaxDeliver() int {
	if t.Groups != nil && t.Groups.MaxDeliver > 0 {
		return t.Groups.MaxDeliver
	}
	return DefaultGroupMaxDeliver
}

// TopicAuth is how a topic's apps authenticate.
type TopicAuth struct {
	Methods []string `json:"methods"`
}

// Retention is how long a topic keeps a message.
type Retention struct {
	MaxAge Duration `json:"max_age,omitempty"`
}

// ModeOrDefault is the topic's mode.
func (t *Topic) ModeOrDefault() string {
	if t.Mode == "" {
		return TopicDurable
	}
	return t.Mode
}

// MaxAge is how long a message of the topic is kept.
func (t *Topic) MaxAge() time.Duration {
	if t.Retention != nil && t.Retention.MaxAge > 0 {
		return time.Duration(t.Retention.MaxAge)
	}
	if t.ModeOrDefault() == TopicBestEffort {
		return DefaultBestEffortMaxAge
	}
	return DefaultTopicMaxAge
}

// DefaultUserClaim is the claim a topic's users are named by unless it
// says another (UserClaim).
const DefaultUserClaim = "sub"

// UserClaimOrDefault is the claim of a client's token that names its user.
func (t *Topic) UserClaimOrDefault() string {
	if t.UserClaim == "" {
		return DefaultUserClaim
	}
	return t.UserClaim
}

// Methods are the authentication methods the topic accepts.
func (t *Topic) Methods() []string {
	if t.Auth == nil || len(t.Auth.Methods) == 0 {
		return []string{topicAuthDefault}
	}
	return t.Auth.Methods
}

// MayPublish and MaySubscribe report whether an app is granted.
func (t *Topic) MayPublish(app string) bool   { return granted(t.Publish, app) }
func (t *Topic) MaySubscribe(app string) bool { return granted(t.Subscribe, app) }

func granted(grants []string, id string) bool {
	for _, g := range grants {
		switch {
		case g == topicGrantAll || g == id:
			return true
		case strings.HasSuffix(g, topicGrantPrefixSuffix) && strings.HasPrefix(id, strings.TrimSuffix(g, "*")):
			return true
		}
	}
	return false
}

// AllowsOrigin reports whether a request's Origin header may connect: no
// Origin (not a browser), or one of the topic's origins exactly.
func (t *Topic) AllowsOrigin(origin string) bool {
	if origin == "" {
		return true
	}
	return origin != topicOriginNull && slices.Contains(t.Origins, origin)
}

// ParseTopic decodes and checks a topic stored under key ("" when not
// stored yet): the schema, then what a schema cannot say.
func ParseTopic(key string, doc []byte) (*Topic, error) {
	js, err := ToJSON(doc)
	if err != nil {
		return nil, &ValidationError{Key: key, Problems: []schemas.Problem{{Message: err.Error()}}}
	}
	if ps := schemas.ValidateTopic(js); len(ps) > 0 {
		return nil, &ValidationError{Key: key, Problems: ps}
	}
	var t Topic
	if err := strictJSON(js, &t); err != nil {
		return nil, &ValidationError{Key: key, Problems: []schemas.Problem{{Message: err.Error()}}}
	}
	var ps []schemas.Problem
	add := func(path, format string, args ...any) {
		ps = append(ps, schemas.Problem{Path: path, Message: fmt.Sprintf(format, args...)})
	}
	if err := bus.ValidName(t.Name); err != nil {
		add("name", "%v", err)
	} else if key != "" && key != t.Name {
		add("name", "must equal the key it is stored under (%q)", key)
	}
	for field, gs := range map[string][]string{"publish": t.Publish, "subscribe": t.Subscribe} {
		for _, g := range gs {
			if g != topicGrantAll && bus.ValidName(strings.TrimSuffix(g, topicGrantPrefixSuffix)) != nil {
				add(field, "%q is not an app id, a \"prefix.*\" glob or \"*\"", g)
			}
		}
	}
	if t.Retention != nil && t.Retention.MaxAge != 0 {
		if d := time.Duration(t.Retention.MaxAge); d < MinTopicMaxAge || d > MaxTopicMaxAge {
			add("retention.max_age", "must be from %v to %v", MinTopicMaxAge, MaxTopicMaxAge)
		}
	}
	for _, o := range t.Origins {
		if !validOrigin(o) {
			add("origins", "%q is not an origin (scheme://host[:port], lower case, no path)", o)
		}
	}
	if g := t.Groups; g != nil {
		if t.ModeOrDefault() == TopicLatestOnly {
			add("groups", "a latest_only topic keeps values, not a queue: no groups")
		}
		if d := time.Duration(g.AckWait); d != 0 && (d < MinGroupAckWait || d > MaxGroupAckWait) {
			add("groups.ack_wait", "must be from %v to %v", MinGroupAckWait, MaxGroupAckWait)
		}
	}
	if len(ps) > 0 {
		return nil, &ValidationError{Key: key, Problems: ps}
	}
	return &t, nil
}

// validOrigin reports whether s is an origin as browsers send it.
func validOrigin(s string) bool {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok || (scheme != "http" && scheme != "https") || rest == "" || strings.ContainsAny(rest, "/?#@ \t") {
		return false
	}
	return s == strings.ToLower(s)
}

// OpenTopics opens the jetway_topics bucket, creating it when missing.
func OpenTopics(ctx context.Context, js jetstream.JetStream, o BucketOptions) (jetstream.KeyValue, error) {
	return openBucket(ctx, js, jetstream.KeyValueConfig{
		Bucket:      BucketTopics,
		Description: "Jetway push topics (key = topic name, value = JSON per schemas/topic.schema.json): admin writes, edges read",
		History:     HistoryDepth,
		Replicas:    max(o.Replicas, 1),
	})
}

// Store is where the topic's messages are kept.
func (t *Topic) Store() bus.PushStore {
	if t.ModeOrDefault() == TopicLatestOnly {
		return bus.PushLatest
	}
	return bus.PushDurable
}

// Push stream bounds: storage (past it the oldest messages go first, and
// a client that wanted them gets a gap) and consumers (each edge has one
// per topic its clients follow; the cap bounds what a compromised edge's
// user could make). A server that cannot reserve PushStreamMaxBytes gets
// the largest halving of it that it can, down to PushStreamMinBytes.
const (
	PushStreamMaxBytes     = 8 << 30
	PushStreamMinBytes     = 64 << 20
	PushStreamMaxConsumers = 10000
)

// JetStream's codes for a stream whose MaxBytes the server cannot reserve
// (nats-server's JSStorageResourcesExceededErr, JSInsufficientResourcesErr).
// On a cluster, a placement the peers have not the room for
// (JSClusterNoPeersErrF, "… insufficient storage") says the same.
const (
	errCodeStorageExceeded       jetstream.ErrorCode = 10047
	errCodeInsufficientResources jetstream.ErrorCode = 10023
	errCodeNoPeers               jetstream.ErrorCode = 10005
)

// noRoomFor reports whether err says the server (or the cluster's peers)
// has not the storage to reserve a stream's MaxBytes.
func noRoomFor(err error) bool {
	var ae *jetstream.APIError
	if !errors.As(err, &ae) {
		return false
	}
	switch ae.ErrorCode {
	case errCodeStorageExceeded, errCodeInsufficientResources:
		return true
	case errCodeNoPeers:
		return strings.Contains(ae.Description, "insufficient storage")
	}
	return false
}

// OpenPushStreams opens the two streams topics' messages are kept in
// (bus.PushDurable, bus.PushLatest), creating them when missing: each
// message with its own TTL (its topic's retention), duplicate publishes
// (the same Nats-Msg-Id) dropped within 2 minutes, no rollups, deletes or
// purges; the latest_only stream keeps one message per subject. Each is
// capped at PushStreamMaxBytes, or at the largest halving of it the
// server can reserve (a small disk, a JetStream max_store), down to
// PushStreamMinBytes: push takes what room there is instead of refusing
// to start.
func OpenPushStreams(ctx context.Context, js jetstream.JetStream, o BucketOptions) error {
	// The ack bucket first: it is small, and the streams then take the
	// room that is left (they halve to fit; it would find none after).
	if err := OpenPushAcks(ctx, js, o); err != nil {
		return err
	}
	for _, p := range []bus.PushStore{bus.PushDurable, bus.PushLatest} {
		cfg := jetstream.StreamConfig{
			Name:         p.Stream,
			Description:  "Jetway push messages (edges publish and read; clients resume from their cursor)",
			Subjects:     []string{p.Prefix + ">"},
			Storage:      jetstream.FileStorage,
			Replicas:     max(o.Replicas, 1),
			MaxAge:       MaxTopicMaxAge,
			MaxBytes:     PushStreamMaxBytes,
			MaxMsgSize:   MaxPushMessage + 64<<10,
			MaxConsumers: PushStreamMaxConsumers,
			Discard:      jetstream.DiscardOld,
			Duplicates:   2 * time.Minute,
			AllowMsgTTL:  true,
			AllowDirect:  true,
			DenyDelete:   true,
			DenyPurge:    true,
		}
		if p == bus.PushLatest {
			cfg.MaxMsgsPerSubject = 1
			cfg.Description = "Jetway push messages of latest_only topics: the newest of each address and key"
		}
		if _, err := js.Stream(ctx, p.Stream); err == nil {
			continue
		} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("opening stream %s: %w", p.Stream, err)
		}
		if err := createPushStream(ctx, js, cfg); err != nil {
			return err
		}
	}
	return nil
}

// BucketPushAcks keeps push subscribers' cumulative acks (push/ack.go):
// edges read and write it.
const BucketPushAcks = bus.BucketPushAcks

// Ack bucket bounds: one value per subscriber (about 100 bytes with its
// key), each kept MaxTopicMaxAge after its last write — an ack older than
// any topic's retention points at nothing. PushAcksMaxBytes holds about
// a million subscribers; past it a new subscriber's first ack is refused
// (KV buckets discard new writes), and it resumes from what the stream
// keeps. A server without the room gets the largest halving it can take.
const (
	PushAcksMaxBytes = 128 << 20
	PushAcksMinBytes = 8 << 20
)

// OpenPushAcks opens the push ack bucket, creating it when missing.
func OpenPushAcks(ctx context.Context, js jetstream.JetStream, o BucketOptions) error {
	if _, err := js.KeyValue(ctx, BucketPushAcks); err == nil {
		return nil
	} else if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return fmt.Errorf("opening bucket %s: %w", BucketPushAcks, err)
	}
	cfg := jetstream.KeyValueConfig{
		Bucket:      BucketPushAcks,
		Description: "Jetway push acks (key = topic.app.d|u|a[.id], value = the last cursor acked): edges read and write",
		History:     1,
		TTL:         MaxTopicMaxAge,
		MaxBytes:    PushAcksMaxBytes,
		Storage:     jetstream.FileStorage,
		Replicas:    max(o.Replicas, 1),
	}
	for {
		_, err := js.CreateKeyValue(ctx, cfg)
		switch {
		case err == nil, errors.Is(err, jetstream.ErrBucketExists):
			return nil
		case noRoomFor(err) && cfg.MaxBytes/2 >= PushAcksMinBytes:
			cfg.MaxBytes /= 2
		default:
			return fmt.Errorf("creating bucket %s (max %d MiB): %w", BucketPushAcks, cfg.MaxBytes>>20, err)
		}
	}
}

// createPushStream creates the stream of cfg, halving its MaxBytes while
// the server has not the room for it.
func createPushStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) error {
	for {
		_, err := js.CreateStream(ctx, cfg)
		switch {
		case err == nil, errors.Is(err, jetstream.ErrStreamNameAlreadyInUse):
			return nil
		case noRoomFor(err) && cfg.MaxBytes/2 >= PushStreamMinBytes:
			cfg.MaxBytes /= 2
		default:
			return fmt.Errorf("creating stream %s (max %d MiB): %w", cfg.Name, cfg.MaxBytes>>20, err)
		}
	}
}

// PutTopic checks and stores a topic; every edge serves it within a
// moment.
func (c *Client) PutTopic(ctx context.Context, doc []byte, opts ...WriteOption) (*Topic, error) {
	t, err := ParseTopic("", doc)
	if err != nil {
		return nil, err
	}
	if c.PushStreamsErr() != nil { // a topic needs its stream: try again, refuse with why
		if err := OpenPushStreams(ctx, c.js, BucketOptions{Replicas: c.replicas}); err != nil {
			return nil, err
		}
	}
	js, _ := ToJSON(doc)
	rev, err := write(ctx, c.topics, "topic", t.Name, js, opts)
	if err != nil {
		return nil, c.notedLater(err, "topic", "put", t.Name)
	}
	t.Revision = rev
	return t, c.noted(ctx, "topic", "put", t.Name, rev, nil)
}

// GetTopic returns a stored topic.
func (c *Client) GetTopic(ctx context.Context, name string) (*Topic, error) {
	e, err := c.topics.Get(ctx, name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("topic %s: %w", name, ErrNotFound)
	} else if err != nil {
		return nil, fmt.Errorf("reading topic %s: %w", name, err)
	}
	t, err := ParseTopic(name, e.Value())
	if err != nil {
		return nil, err
	}
	t.Revision = e.Revision()
	return t, nil
}

// ListTopics returns every stored topic, sorted by name.
func (c *Client) ListTopics(ctx context.Context) ([]Listed[*Topic], error) {
	return listParsed(ctx, c.topics, ParseTopic)
}

// DeleteTopic removes a topic: edges refuse its publishes and close its
// subscriptions. Its kept messages expire with their TTL.
func (c *Client) DeleteTopic(ctx context.Context, name string, opts ...WriteOption) error {
	if _, err := c.topics.Get(ctx, name); errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("topic %s: %w", name, ErrNotFound)
	}
	if err := remove(ctx, c.topics, "topic", name, opts); err != nil {
		return c.notedLater(err, "topic", "delete", name)
	}
	return c.noted(ctx, "topic", "delete", name, 0, nil)
}

// BuiltinPrefix starts every path an edge serves itself (push's
// endpoints); no API route may be under it.
const BuiltinPrefix = "/_jetway/"
