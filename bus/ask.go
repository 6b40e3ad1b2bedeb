package bus

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
)

// AskEveryNode publishes a question that every node following subject
// answers at once (the operators' questions: MetricsQuerySubject,
// PushQuerySubject), and hands each answer to each until none has come
// for half a second, or ctx ends. It waits up to a second for the first.
// It does not know how many nodes there are: one that answers later than
// that is left out, and asking again includes it.
func AskEveryNode(ctx context.Context, nc *nats.Conn, subject string, q []byte, each func([]byte)) error {
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest(subject, inbox, q); err != nil {
		return err
	}
	wait := time.Second // the first answer may take a round trip or two
	for ctx.Err() == nil {
		m, err := sub.NextMsg(wait)
		if err != nil {
			break // quiet for a moment: every node that is up has answered
		}
		wait = 500 * time.Millisecond // a busy node answers a moment after another
		each(m.Data)
	}
	return nil
}
