package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/user"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
)

// Change is one write to the registry as the audit trail keeps it: what
// (kind and key), how (action), which revision it made (0 for a
// deletion), who (the client's actor) and when.
type Change struct {
	At       time.Time `json:"at"`
	Actor    string    `json:"actor"`
	Action   string    `json:"action"` // put, delete, rollback
	Kind     string    `json:"kind"`   // api, app, degrade, fault, alert, jsonschema, schema, cert, channel, release, ...
	Key      string    `json:"key"`
	Revision uint64    `json:"revision,omitempty"`
	// Settled is how a write whose answer never came was found to have
	// landed: SettledReadBack, or "" for a write that was answered.
	Settled string `json:"settled,omitempty"`
	// Seq is the change's place in the trail (set when read).
	Seq uint64 `json:"seq,omitempty"`
}

// SettledReadBack is a Change's Settled for a write that got no answer and
// was then read back in force (OutcomeUnknownError.Settle).
const SettledReadBack = "read-back"

// Audit trail bounds: a year of changes, at most AuditMaxBytes.
const (
	AuditMaxAge   = 365 * 24 * time.Hour
	AuditMaxBytes = 256 << 20
)

// OpenAudit opens the audit stream, creating it when missing.
func OpenAudit(ctx context.Context, js jetstream.JetStream, o BucketOptions) (jetstream.Stream, error) {
	st, err := js.Stream(ctx, bus.StreamAudit)
	if err == nil {
		return st, nil
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("opening stream %s: %w", bus.StreamAudit, err)
	}
	st, err = js.CreateStream(ctx, jetstream.StreamConfig{
		Name:        bus.StreamAudit,
		Description: "Jetway audit trail: every registry change written through Jetway (admin writes and reads)",
		Subjects:    []string{bus.AuditPrefix + ">"},
		MaxAge:      AuditMaxAge,
		MaxBytes:    AuditMaxBytes,
		Storage:     jetstream.FileStorage,
		Replicas:    max(o.Replicas, 1),
		// The trail is appended to, never rewritten.
		DenyDelete: true,
		DenyPurge:  true,
	})
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return js.Stream(ctx, bus.StreamAudit)
	}
	if err != nil {
		return nil, fmt.Errorf("creating stream %s: %w", bus.StreamAudit, err)
	}
	return st, nil
}

// As returns a client whose writes the audit trail names actor: a REST
// call's token, the console's session. The CLI's default is
// DefaultActor.
func (c *Client) As(actor string) *Client {
	cc := *c
	cc.actor = actor
	return &cc
}

// WithAuditErrors returns a client that hands a write's failed audit
// record to f (an ErrAuditNotRecorded) and returns the write's result as a
// success: a write that was made — a rotated key, a new app — must reach
// its caller, who then says the record is missing. Without it, such a
// write returns its result and the error together.
func (c *Client) WithAuditErrors(f func(error)) *Client {
	cc := *c
	cc.auditErr = f
	return &cc
}

// AuditKinds are the kinds of change the trail records.
var AuditKinds = []string{"api", "app", "degrade", "fault", "alert", "jsonschema", "schema", "cert", "token", "cache", "topic", "push", "secret", "dlq", "channel", "release", "report"}

// Record adds a change made outside the registry's buckets (a cache
// purge, a kick of push connections) to the audit trail.
func (c *Client) Record(ctx context.Context, kind, action, key string) error {
	return c.noted(ctx, kind, action, key, 0, nil)
}

// DefaultActor names a process's writes: "cli:<user>@<host>".
func DefaultActor() string {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, _ := os.Hostname()
	return "cli:" + name + "@" + host
}

// ErrAuditNotRecorded wraps a write that was made but whose audit record
// could not be stored: the change stands, the error says so.
var ErrAuditNotRecorded = errors.New("the change was written but not recorded in the audit trail")

// noted records a change made (err nil) in the audit trail and returns
// err, or the recording's failure wrapped in ErrAuditNotRecorded.
func (c *Client) noted(ctx context.Context, kind, action, key string, rev uint64, err error) error {
	if err != nil {
		return err
	}
	ch := Change{At: time.Now().UTC(), Actor: c.actor, Action: action, Kind: kind, Key: key, Revision: rev}
	if c.settled {
		ch.Settled = SettledReadBack
	}
	b, _ := json.Marshal(ch)
	_, perr := c.js.Publish(ctx, bus.AuditPrefix+kind, b)
	if errors.Is(perr, jetstream.ErrNoStreamResponse) {
		// The stream is gone (deleted by hand): make it again, once.
		if _, oerr := OpenAudit(ctx, c.js, BucketOptions{}); oerr == nil {
			_, perr = c.js.Publish(ctx, bus.AuditPrefix+kind, b)
		}
	}
	if perr == nil {
		return nil
	}
	err = fmt.Errorf("%w: %s %s %s: %v", ErrAuditNotRecorded, action, kind, key, perr)
	if c.auditErr != nil {
		c.auditErr(err)
		return nil
	}
	return err
}

// ErrAuditKind is a kind the trail does not record.
var ErrAuditKind = errors.New("not a kind of change")

// Audit returns the changes recorded since since (zero: from the start),
// of one kind ("" for all), at most limit (the newest; 0: 1000), within
// ctx: a read of all kinds starts limit records from the end; one of a kind
// reads from since and stops at ctx's deadline with what it has and the
// error.
func (c *Client) Audit(ctx context.Context, since time.Time, kind string, limit int) ([]Change, error) {
	if limit <= 0 {
		limit = 1000
	}
	if kind != "" && !slices.Contains(AuditKinds, kind) {
		return nil, fmt.Errorf("%w: %q (one of %s)", ErrAuditKind, kind, strings.Join(AuditKinds, ", "))
	}
	st, err := c.js.Stream(ctx, bus.StreamAudit)
	if err != nil {
		return nil, fmt.Errorf("opening the audit trail: %w", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the audit trail: %w", err)
	}
	if info.State.Msgs == 0 {
		return nil, nil
	}
	// A consumer of this read only: gone a second after it ends.
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy, InactiveThreshold: time.Second}
	if kind == "" && info.State.LastSeq >= uint64(limit) && info.State.LastSeq-uint64(limit)+1 > info.State.FirstSeq {
		// All kinds: only the last limit records can be the answer.
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, info.State.LastSeq-uint64(limit)+1
	}
	if !since.IsZero() && cfg.DeliverPolicy == jetstream.DeliverAllPolicy {
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &since
	}
	if kind != "" {
		cfg.FilterSubjects = []string{bus.AuditPrefix + kind}
	}
	cons, err := st.OrderedConsumer(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("reading the audit trail: %w", err)
	}
	var out []Change
	for {
		if err := ctx.Err(); err != nil {
			return out, fmt.Errorf("reading the audit trail: %w (narrow it with since)", err)
		}
		batch, err := cons.Fetch(256, jetstream.FetchMaxWait(250*time.Millisecond))
		if err != nil {
			return nil, fmt.Errorf("reading the audit trail: %w", err)
		}
		n, pending := 0, uint64(1)
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			pending = md.NumPending
			var ch Change
			if json.Unmarshal(m.Data(), &ch) != nil {
				continue
			}
			ch.Seq = md.Sequence.Stream
			if !since.IsZero() && ch.At.Before(since) {
				continue // a read from a sequence: the records before since are not asked for
			}
			out = append(out, ch)
			if len(out) > limit {
				out = out[1:]
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("reading the audit trail: %w", err)
		}
		if n == 0 || pending == 0 {
			return out, nil // the end of the trail (of this kind)
		}
	}
}
