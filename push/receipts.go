package push

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetway-gw/jetway/registry"
)

// Delivery receipts: a producer that publishes a message to a device or a
// user with receipt=1 learns each time it was written to a
// client — which app, device, user and transport, and when — on any edge.
// The edge that writes it stores a receipt in the push stream, on
//
//	<prefix><topic>.rcpt.<publisher>.<seq>.<subscriber>
//
// kept for the topic's retention, once per subscriber (Nats-Msg-Id, within
// the stream's 2 minutes of duplicate window: a client that resumes and is
// written the message again adds no second one); GET /_jetway/receipts
// reads them, for the publisher only. No subscriber receives a receipt.

// hdrReceipt marks a stored message whose publisher asked for receipts.
const hdrReceipt = "Jetway-Receipt"

// receiptFor is the publisher a message's receipts go to; "" when none
// were asked for.
func receiptFor(h nats.Header) string {
	if h.Get(hdrReceipt) != "1" {
		return ""
	}
	if p := h.Get("Jetway-Publisher"); p != "" {
		return p
	}
	return "_"
}

// Receipt is one write of a message to a client.
type Receipt struct {
	Seq       uint64    `json:"seq"`
	App       string    `json:"app"`
	Device    string    `json:"device,omitempty"`
	User      string    `json:"user,omitempty"`
	Transport string    `json:"transport"`
	At        time.Time `json:"at"`
}

// sendReceipts stores the receipts of messages written to a session's
// client: fire and forget (a lost one is a receipt missing, never a
// message).
func (ss *Session) sendReceipts() {
	if len(ss.receipts) == 0 {
		return
	}
	sb, now := ss.sb, time.Now()
	who := sb.app + "\x00" + sb.device + "\x00" + sb.user
	for _, d := range ss.receipts {
		r := Receipt{Seq: d.seq, App: sb.app, Device: sb.device, User: sb.user, Transport: sb.transport, At: now}
		seq := strconv.FormatUint(d.seq, 10)
		m := nats.NewMsg(ss.store.Subject(ss.topic, kindRcpt, d.receiptFor, seq, who))
		m.Data, _ = json.Marshal(r)
		m.Header.Set("Nats-Msg-Id", "rcpt\x00"+ss.topic+"\x00"+seq+"\x00"+who)
		m.Header.Set("Nats-TTL", ss.ttl)
		if err := ss.s.nc.PublishMsg(m); err != nil {
			ss.s.log.Debug("push: a delivery receipt", "topic", ss.topic, "seq", seq, "err", err)
		}
		ss.s.stats.receipts.Add(1)
	}
	clear(ss.receipts)
	ss.receipts = ss.receipts[:0]
}

// MaxReceipts bounds the receipts one answer holds.
const MaxReceipts = 256

// ErrNotPublisher is a receipt asked for by another app than the
// message's publisher.
var ErrNotPublisher = errors.New("receipts are the publisher's")

// Receipts reads the receipts of message seq of topic t, published by
// publisher (an app id): at most MaxReceipts, the first ones.
func (s *Server) Receipts(ctx context.Context, t *registry.Topic, publisher string, seq uint64) ([]Receipt, error) {
	p := t.Store()
	subj := p.Subject(t.Name, kindRcpt, publisher, strconv.FormatUint(seq, 10), "")
	subj = subj[:len(subj)-1] + "*" // every subscriber's
	ctx, cancel := context.WithTimeout(ctx, s.o.RequestTimeout)
	defer cancel()
	inbox := s.nc.NewInbox()
	sub, err := s.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, fmt.Errorf("reading receipts: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	req, _ := json.Marshal(directGet{Seq: seq, NextBySubj: subj, Batch: MaxReceipts})
	if err := s.nc.PublishRequest("$JS.API.DIRECT.GET."+p.Stream, inbox, req); err != nil {
		return nil, fmt.Errorf("reading receipts: %w", err)
	}
	out := []Receipt{}
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return nil, fmt.Errorf("reading receipts: %w", err)
		}
		switch m.Header.Get("Status") {
		case "404", "204":
			return out, nil
		case "":
		default:
			return nil, fmt.Errorf("reading receipts: %s %s", m.Header.Get("Status"), m.Header.Get("Description"))
		}
		var r Receipt
		if json.Unmarshal(m.Data, &r) == nil && r.Seq == seq {
			out = append(out, r)
		}
	}
}
