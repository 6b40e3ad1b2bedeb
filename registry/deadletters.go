package registry

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
)

// Dead-letter headers, as the worker writes them: why the job ended,
// after how many attempts, with what last error, and whose it was.
const (
	HdrDeadReason   = "Jetway-Dlq-Reason"
	HdrDeadState    = "Jetway-Dlq-State"
	HdrDeadAttempts = "Jetway-Dlq-Attempts"
	HdrDeadError    = "Jetway-Dlq-Error"
	HdrDeadApp      = "Jetway-Dlq-App"
)

// DeadLetter is one record of the dead letters (jetway_dlq): an async job
// that ended without success, its request as it was submitted, and why.
type DeadLetter struct {
	Seq       uint64    `json:"seq"`
	Job       string    `json:"job"`
	API       string    `json:"api"`
	Tier      string    `json:"tier"`
	Pool      string    `json:"pool"`
	App       string    `json:"app,omitempty"`
	User      string    `json:"user,omitempty"` // the token subject the job was submitted with
	Reason    string    `json:"reason"`
	State     string    `json:"state"`
	Attempts  int       `json:"attempts"`
	Error     string    `json:"error,omitempty"`
	At        time.Time `json:"at"`
	Method    string    `json:"method"`
	Path      string    `json:"path"`
	RequestID string    `json:"request_id,omitempty"`
	Size      int       `json:"size"` // the request body's
}

// ErrNoDeadLetters is returned when the dead letters stream is missing.
var ErrNoDeadLetters = errors.New("no dead letters stream (async jobs were never set up on this cluster)")

// ErrNotReplayable matches a replay refused for what the record is: not a
// job's, or of a job that has not ended (a replay already sent it again).
var ErrNotReplayable = errors.New("nothing to replay")

// deadLetterFilter is the subject filter of one API's dead letters (every
// pool and tier), or of all ("").
func deadLetterFilter(api string) string {
	if api == "" {
		return bus.DeadLetterPrefix + ">"
	}
	return bus.DeadLetterPrefix + "*.*." + api
}

func (c *Client) deadLetters(ctx context.Context) (jetstream.Stream, error) {
	st, err := c.js.Stream(ctx, bus.StreamDeadLetters)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, ErrNoDeadLetters
	}
	if err != nil {
		return nil, fmt.Errorf("opening the dead letters: %w", err)
	}
	return st, nil
}

// DeadLetters lists the newest limit dead letters, of one API or all
// (api ""), oldest first.
func (c *Client) DeadLetters(ctx context.Context, api string, limit int) ([]DeadLetter, error) {
	if api != "" {
		if err := bus.ValidName(api); err != nil {
			return nil, fmt.Errorf("api %q: %w", api, err)
		}
	}
	if limit <= 0 {
		limit = 100
	}
	st, err := c.deadLetters(ctx)
	if err != nil {
		return nil, err
	}
	n, err := countDeadLetters(ctx, st, api)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, nil
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{deadLetterFilter(api)}, InactiveThreshold: time.Second, HeadersOnly: true})
	if err != nil {
		return nil, fmt.Errorf("reading the dead letters: %w", err)
	}
	var out []DeadLetter
	for {
		batch, err := cons.Fetch(256, jetstream.FetchMaxWait(250*time.Millisecond))
		if err != nil {
			return nil, fmt.Errorf("reading the dead letters: %w", err)
		}
		n, pending := 0, uint64(0)
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			pending = md.NumPending
			out = append(out, deadLetterOf(m.Subject(), m.Headers(), md.Sequence.Stream, md.Timestamp))
			if len(out) > limit {
				out = out[1:]
			}
		}
		if n == 0 || pending == 0 {
			return out, nil
		}
		if err := ctx.Err(); err != nil {
			return out, err
		}
	}
}

// deadLetterOf reads a dead letter's record from its subject and headers.
func deadLetterOf(subject string, h nats.Header, seq uint64, at time.Time) DeadLetter {
	tok, tier, api, _ := bus.ParseJobSubject(subject)
	d := DeadLetter{Seq: seq, Job: h.Get(bus.HdrJobID), API: api, Tier: tier, Pool: strings.ReplaceAll(tok, ":", "."),
		App: h.Get(HdrDeadApp), User: h.Get(bus.HdrJobUser), Reason: h.Get(HdrDeadReason), State: h.Get(HdrDeadState), Error: h.Get(HdrDeadError), At: at.UTC(),
		Method: h.Get(bus.HdrMethod), Path: h.Get(bus.HdrPath), RequestID: h.Get(bus.HdrRequestID)}
	d.Attempts, _ = strconv.Atoi(h.Get(HdrDeadAttempts))
	d.Size, _ = strconv.Atoi(h.Get("Nats-Msg-Size")) // a headers-only read says the size
	return d
}

// countDeadLetters counts the dead letters of one API, or all: the sum of
// the per-subject counts a filtered stream info gives (its message count
// is the whole stream's, whatever the filter).
func countDeadLetters(ctx context.Context, st jetstream.Stream, api string) (uint64, error) {
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(deadLetterFilter(api)))
	if err != nil {
		return 0, fmt.Errorf("reading the dead letters: %w", err)
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n, nil
}

// DeadLetter reads one dead letter by its sequence, with the request's
// body.
func (c *Client) DeadLetter(ctx context.Context, seq uint64) (*DeadLetter, []byte, error) {
	st, err := c.deadLetters(ctx)
	if err != nil {
		return nil, nil, err
	}
	m, err := st.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil, fmt.Errorf("dead letter %d: %w", seq, ErrNotFound)
	} else if err != nil {
		return nil, nil, fmt.Errorf("reading dead letter %d: %w", seq, err)
	}
	d := deadLetterOf(m.Subject, m.Header, m.Sequence, m.Time)
	d.Size = len(m.Data)
	return &d, m.Data, nil
}

// ReplayDeadLetter sends a dead letter's job again: the same job (its
// status, found by its caller at the same address, is pending again with
// no attempts spent) with the request as it was submitted. The record
// leaves the dead letters once the job is back in the jobs stream.
func (c *Client) ReplayDeadLetter(ctx context.Context, seq uint64) (*DeadLetter, error) {
	st, err := c.deadLetters(ctx)
	if err != nil {
		return nil, err
	}
	m, err := st.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, fmt.Errorf("dead letter %d: %w", seq, ErrNotFound)
	} else if err != nil {
		return nil, fmt.Errorf("reading dead letter %d: %w", seq, err)
	}
	d := deadLetterOf(m.Subject, m.Header, m.Sequence, m.Time)
	tok, tier, api, ok := bus.ParseJobSubject(m.Subject)
	if !ok || !ValidJobID(d.Job) {
		return nil, fmt.Errorf("%w: dead letter %d is not a job's (subject %s)", ErrNotReplayable, seq, m.Subject)
	}
	var undo func()
	if tier != bus.TierCallback { // a callback goes again as it was; its job has ended
		if undo, err = c.resetJob(ctx, &d, api, tier); err != nil {
			return nil, err
		}
	}
	h := nats.Header{}
	for k, vs := range m.Header {
		// Not the status its edge wrote first: the job's status is
		// another now, and the worker reads it.
		if strings.HasPrefix(k, "Jetway-Dlq-") || strings.HasPrefix(k, "Nats-") || k == bus.HdrJobStatus {
			continue
		}
		h[k] = vs
	}
	h.Set(jetstream.MsgIDHeader, "replay."+d.Job+"."+strconv.FormatUint(seq, 10))
	out := &nats.Msg{Subject: bus.JobsPrefix + tok + "." + tier + "." + api, Header: h, Data: m.Data}
	if _, err := c.js.PublishMsg(ctx, out); err != nil {
		// Refused, the job is surely not back: its status is put back
		// as it was, or the replay could not be tried again while the
		// pending status lives. After a timeout it may be back, and runs.
		var ae *jetstream.APIError
		if undo != nil && (errors.As(err, &ae) || errors.Is(err, nats.ErrNoResponders)) {
			undo()
		}
		return nil, fmt.Errorf("sending job %s again: %w", d.Job, err)
	}
	if err := st.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return &d, fmt.Errorf("job %s is sent again, but its dead letter %d stays: %w", d.Job, seq, err)
	}
	return &d, c.noted(ctx, "dlq", "replay", d.API+"/"+d.Job, 0, nil)
}

// resetJob makes a dead letter's job pending again, with no attempts
// spent, at its status's address (a new status when it was not kept). Its
// undo puts the status back as it was (best effort), for a job the
// stream then refused.
func (c *Client) resetJob(ctx context.Context, d *DeadLetter, api, tier string) (undo func(), err error) {
	jobs, err := NewJobStore(c.js.Conn())
	if err != nil {
		return nil, err
	}
	ttl := JobKeepAge // the job may wait its API's max_age from the replay
	js, err := jobs.Get(ctx, d.Job)
	var prev *JobStatus
	switch {
	case errors.Is(err, ErrNotFound):
		js = &JobStatus{ID: d.Job, API: api, Tier: tier, Pool: d.Pool, App: d.App, User: d.User, RequestID: d.RequestID, Submitted: time.Now().UTC()}
	case err != nil:
		return nil, err
	case !js.Final():
		return nil, fmt.Errorf("%w: job %s is %s, it has not ended", ErrNotReplayable, d.Job, js.State)
	default:
		was := *js
		prev = &was
	}
	js.State, js.Attempts, js.Reason, js.LastError, js.Result, js.NextAttempt, js.Callbacks = JobPending, 0, "", nil, nil, nil, nil
	if js.Revision == 0 {
		err = jobs.Create(ctx, js, ttl)
	} else {
		err = jobs.Update(ctx, js, ttl)
	}
	if err != nil {
		return nil, fmt.Errorf("resetting job %s: %w", d.Job, err)
	}
	return func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if prev == nil {
			_ = jobs.Discard(uctx, js)
			return
		}
		prev.Revision = js.Revision
		_ = jobs.Update(uctx, prev, DefaultAsyncAge)
	}, nil
}

// PurgeDeadLetters removes the dead letters of one API, or all (api ""),
// and says how many went.
func (c *Client) PurgeDeadLetters(ctx context.Context, api string) (uint64, error) {
	if api != "" {
		if err := bus.ValidName(api); err != nil {
			return 0, fmt.Errorf("api %q: %w", api, err)
		}
	}
	st, err := c.deadLetters(ctx)
	if err != nil {
		return 0, err
	}
	n, err := countDeadLetters(ctx, st, api)
	if err != nil {
		return 0, err
	}
	var opts []jetstream.StreamPurgeOpt
	if api != "" {
		opts = append(opts, jetstream.WithPurgeSubject(deadLetterFilter(api)))
	}
	if err := st.Purge(ctx, opts...); err != nil {
		return 0, fmt.Errorf("purging the dead letters: %w", err)
	}
	key := api
	if key == "" {
		key = "*"
	}
	return n, c.noted(ctx, "dlq", "purge", key, 0, nil)
}
