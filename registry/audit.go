package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/user"
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
	Kind     string    `json:"kind"`   // api, app, degrade, fault, alert, jsonschema, schema, cert
	Key      string    `json:"key"`
	Revision uint64    `json:"revision,omitempty"`
	// Seq is the change's place in the trail (set when read).
	Seq uint64 `json:"seq,omitempty"`
}

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
	b, _ := json.Marshal(Change{At: time.Now().UTC(), Actor: c.actor, Action: action, Kind: kind, Key: key, Revision: rev})
	if _, perr := c.js.Publish(ctx, bus.AuditPrefix+kind, b); perr != nil {
		return fmt.Errorf("%w: %s %s %s: %v", ErrAuditNotRecorded, action, kind, key, perr)
	}
	return nil
}

// Audit returns the changes recorded since since (zero: from the start),
// of one kind ("" for all), at most limit (the newest; 0: 1000).
func (c *Client) Audit(ctx context.Context, since time.Time, kind string, limit int) ([]Change, error) {
	if limit <= 0 {
		limit = 1000
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
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy}
	if !since.IsZero() {
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
