package bus

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// AskEveryNode publishes a question that every node following subject
// answers at once (the operators' questions: MetricsQuerySubject,
// PushQuerySubject) and hands each answer to each, which says which node
// it is from ("" when it cannot tell).
//
// With roles, the nodes of those roles are known by their heartbeats,
// heard meanwhile: it gathers until at least a heartbeat period has passed
// (every live node has beaten once) and every node heard has answered, or
// until ctx ends; missing are the nodes that beat but did not answer.
// Without roles, it gathers until none has answered for half a second
// (waiting up to a second for the first): a node slower than that is left
// out, unknown.
func AskEveryNode(ctx context.Context, nc *nats.Conn, subject string, q []byte, roles []string, each func([]byte) (node string)) (missing []string, err error) {
	inbox := nc.NewRespInbox()
	answers := make(chan *nats.Msg, 64)
	sub, err := nc.ChanSubscribe(inbox, answers)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	beats := make(chan *nats.Msg, 64)
	for _, role := range roles {
		bs, err := nc.ChanSubscribe(HeartbeatPrefix+role+".*", beats)
		if err != nil {
			return nil, err
		}
		defer func() { _ = bs.Unsubscribe() }()
	}
	if err := nc.PublishRequest(subject, inbox, q); err != nil {
		return nil, err
	}
	heard, answered := map[string]bool{}, map[string]bool{}
	done := func() bool {
		for id := range heard {
			if !answered[id] {
				return false
			}
		}
		return true
	}
	// Without roles: quiet for a moment after the last answer.
	wait := time.Second
	quiet := time.NewTimer(wait)
	defer quiet.Stop()
	// With roles: a heartbeat period, then whenever the last heard answers.
	period := time.NewTimer(DefaultHeartbeatPeriod + 250*time.Millisecond)
	defer period.Stop()
	periodOver := false
	for {
		select {
		case <-ctx.Done():
			for id := range heard {
				if !answered[id] {
					missing = append(missing, id)
				}
			}
			slices.Sort(missing)
			return missing, nil
		case m := <-answers:
			if id := each(m.Data); id != "" {
				answered[id] = true
			}
			if len(roles) == 0 {
				quiet.Reset(500 * time.Millisecond) // a busy node answers a moment after another
			} else if periodOver && done() {
				return nil, nil
			}
		case m := <-beats:
			heard[m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]] = true
		case <-quiet.C:
			if len(roles) == 0 {
				return nil, nil
			}
		case <-period.C:
			periodOver = true
			if len(roles) > 0 && done() {
				return nil, nil
			}
		}
	}
}
