package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Publishing to a stream and reading its acknowledgement, for the job
// paths that do it a few times a job (the status writes, the job
// itself). jetstream.PublishMsg decodes each ack with encoding/json, a
// twentieth of a job's CPU in `serve`; the ack of a stored message is a
// small compact object the server writes one way, read here by hand
// (anything else goes through encoding/json as before).

// pubRetries and pubRetryWait are jetstream's defaults: a "no responders"
// (a stream between leaders) is asked again twice, a quarter second
// apart.
const (
	pubRetries     = 2
	pubRetryWait   = 250 * time.Millisecond
	pubDefaultWait = 5 * time.Second // with no deadline in the context
)

// errNoStream is a publish no stream answered: it matches both
// jetstream.ErrNoStreamResponse and nats.ErrNoResponders.
var errNoStream = fmt.Errorf("%w (%w)", jetstream.ErrNoStreamResponse, nats.ErrNoResponders)

// publishAck publishes m to its stream and returns the stored sequence
// and whether the stream had it already (Nats-Msg-Id). A refusal is a
// *jetstream.APIError, as from jetstream.PublishMsg.
func publishAck(ctx context.Context, nc *nats.Conn, m *nats.Msg) (seq uint64, duplicate bool, err error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, pubDefaultWait)
		defer cancel()
	}
	resp, err := nc.RequestMsgWithContext(ctx, m)
	for r := 0; errors.Is(err, nats.ErrNoResponders) && r < pubRetries; r++ {
		if sleepCtx(ctx, pubRetryWait) != nil {
			break
		}
		resp, err = nc.RequestMsgWithContext(ctx, m)
	}
	if errors.Is(err, nats.ErrNoResponders) {
		return 0, false, errNoStream
	}
	if err != nil {
		return 0, false, err
	}
	return parsePubAck(resp.Data)
}

// parsePubAck reads a JetStream publish acknowledgement:
// {"stream":"S","seq":N}, with ,"duplicate": true (the server writes
// that one with a space) or ,"domain":"D", or {"error":{...}}.
func parsePubAck(b []byte) (seq uint64, duplicate bool, err error) {
	if !bytes.Contains(b, []byte(`"error"`)) {
		if i := bytes.Index(b, []byte(`"seq":`)); i > 0 && bytes.HasPrefix(b, []byte(`{"stream":"`)) {
			rest := b[i+len(`"seq":`):]
			n := 0
			for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
				n++
			}
			if n > 0 && n < len(rest) && (rest[n] == ',' || rest[n] == '}') {
				if seq, err := strconv.ParseUint(string(rest[:n]), 10, 64); err == nil && seq > 0 {
					return seq, ackDuplicate(b), nil
				}
			}
		}
	}
	var ack struct {
		Error     *jetstream.APIError `json:"error"`
		Stream    string              `json:"stream"`
		Seq       uint64              `json:"seq"`
		Duplicate bool                `json:"duplicate"`
	}
	if err := json.Unmarshal(b, &ack); err != nil {
		return 0, false, jetstream.ErrInvalidJSAck
	}
	if ack.Error != nil {
		return 0, false, fmt.Errorf("nats: %w", ack.Error)
	}
	if ack.Stream == "" {
		return 0, false, jetstream.ErrInvalidJSAck
	}
	return ack.Seq, ack.Duplicate, nil
}

// ackDuplicate reports whether an ack says "duplicate": true.
func ackDuplicate(b []byte) bool {
	i := bytes.Index(b, []byte(`"duplicate":`))
	if i < 0 {
		return false
	}
	return bytes.HasPrefix(bytes.TrimLeft(b[i+len(`"duplicate":`):], " "), []byte("true"))
}
