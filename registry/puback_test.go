package registry

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus/natstest"
)

// publishAck reads what a real server answers as jetstream.PublishMsg
// does: the sequence, a duplicate, and each refusal as an APIError.
func TestPublishAckReadsTheServersAnswers(t *testing.T) {
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "ACKS", Subjects: []string{"acks.>"}, MaxMsgsPerSubject: 2, Discard: jetstream.DiscardNew,
		DiscardNewPerSubject: true, MaxMsgSize: 64,
	}); err != nil {
		t.Fatal(err)
	}
	msg := func(subj, id string, lastSeq string) *nats.Msg {
		m := nats.NewMsg(subj)
		m.Data = []byte("x")
		if id != "" {
			m.Header.Set(jetstream.MsgIDHeader, id)
		}
		if lastSeq != "" {
			m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, lastSeq)
		}
		return m
	}
	seq, dup, err := publishAck(ctx, nc, msg("acks.a", "one", ""))
	if err != nil || seq != 1 || dup {
		t.Fatalf("first: %d %v %v", seq, dup, err)
	}
	seq, dup, err = publishAck(ctx, nc, msg("acks.a", "one", ""))
	if err != nil || seq != 1 || !dup {
		t.Fatalf("the same Nats-Msg-Id again: %d %v %v", seq, dup, err)
	}
	if seq, _, err = publishAck(ctx, nc, msg("acks.b", "", "0")); err != nil || seq != 2 {
		t.Fatalf("a new subject at revision 0: %d %v", seq, err)
	}
	if _, _, err = publishAck(ctx, nc, msg("acks.b", "", "0")); !isWrongLastSeq(err) {
		t.Fatalf("a stale revision: %v, want a wrong last sequence", err)
	}
	if _, _, err = publishAck(ctx, nc, msg("acks.a", "two", "")); err != nil {
		t.Fatal(err)
	}
	var ae *jetstream.APIError
	if _, _, err = publishAck(ctx, nc, msg("acks.a", "three", "")); !errors.As(err, &ae) || !strings.Contains(ae.Description, "maximum") {
		t.Fatalf("a full subject: %#v", err)
	}
	big := msg("acks.c", "", "")
	big.Data = make([]byte, 100)
	if _, _, err = publishAck(ctx, nc, big); !errors.As(err, &ae) {
		t.Fatalf("a message over the stream's size: %v", err)
	}
	if _, _, err = publishAck(ctx, nc, msg("nostream.a", "", "")); !errors.Is(err, nats.ErrNoResponders) || !errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Fatalf("no stream: %v", err)
	}
}

func TestParsePubAck(t *testing.T) {
	for _, c := range []struct {
		ack  string
		seq  uint64
		dup  bool
		fail bool
	}{
		{ack: `{"stream":"S","seq":42}`, seq: 42},
		{ack: `{"stream":"S","seq":7,"duplicate": true}`, seq: 7, dup: true}, // as the server writes it
		{ack: `{"stream":"S","seq":7,"duplicate":true}`, seq: 7, dup: true},
		{ack: `{"stream":"S","seq":7,"duplicate":false}`, seq: 7},
		{ack: `{"stream":"S","domain":"hub","seq":9}`, seq: 9},
		{ack: `{ "stream": "S", "seq": 11 }`, seq: 11}, // not the server's shape: read by encoding/json
		{ack: `{"stream":"S","seq":18446744073709551616}`, fail: true},
		{ack: `{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"},"stream":"S","seq":0}`, fail: true},
		{ack: `{"seq":3}`, fail: true},
		{ack: `not json`, fail: true},
	} {
		seq, dup, err := parsePubAck([]byte(c.ack))
		if (err != nil) != c.fail || seq != c.seq || dup != c.dup {
			t.Errorf("%s: %d %v %v", c.ack, seq, dup, err)
		}
	}
}
