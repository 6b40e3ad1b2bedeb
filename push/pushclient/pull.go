package pushclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// ackFrame is a connection's ack of cursor.
func ackFrame(cursor string) []byte {
	b, _ := json.Marshal(map[string]string{"type": "ack", "cursor": cursor})
	return b
}

// Pulled is the answer to a pull: the messages after the cursor it was
// asked from, the gaps, and the cursor the next pull goes on after.
type Pulled struct {
	Topic    string          `json:"topic"`
	Messages []PulledMessage `json:"messages"`
	Gaps     []Gap           `json:"gaps"`
	Cursor   string          `json:"cursor"`
}

// PulledMessage is one message of a pull: its cursor and data, and for a
// group's message its receipt (what acks it) and delivery attempt.
type PulledMessage struct {
	Cursor  string `json:"cursor"`
	Data    string `json:"data"`
	Receipt string `json:"receipt"`
	Attempt uint64 `json:"attempt"`
}

// Pull asks an edge (o.Edge, http:// or https://) for up to max messages
// of o.Topic after o.After — a cursor, or "" for the last one acked —
// waiting up to wait for the first (GET /_jetway/pull). max 0: the edge's
// default (100).
func Pull(ctx context.Context, o Options, max int, wait time.Duration) (*Pulled, error) {
	q := url.Values{}
	setQuery(q, o)
	if max > 0 {
		q.Set("max", strconv.Itoa(max))
	}
	if wait > 0 {
		q.Set("wait", wait.String())
	}
	var p Pulled
	if err := call(ctx, o, http.MethodGet, "pull", q, nil, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// Ack acknowledges every message of o.Topic up to cursor for the
// subscriber o names (its credentials, o.Device) over HTTP (POST
// /_jetway/ack), and returns the ack stored now: cursor, or a later one
// stored before.
func Ack(ctx context.Context, o Options, cursor string) (string, error) {
	q := url.Values{}
	if o.Device != "" {
		q.Set("device", o.Device)
	}
	body, _ := json.Marshal(map[string]string{"cursor": cursor})
	var out struct {
		Acked string `json:"acked"`
	}
	if err := call(ctx, o, http.MethodPost, "ack", q, body, &out); err != nil {
		return "", err
	}
	return out.Acked, nil
}

// AckGroup acks and nacks messages of o.Group by their receipts over HTTP
// (POST /_jetway/ack?group=), on any edge; the nacked ones are delivered
// again after delay (0: at once).
func AckGroup(ctx context.Context, o Options, ack, nack []string, delay time.Duration) error {
	q := url.Values{"group": {o.Group}}
	b := map[string]any{"ack": ack, "nack": nack}
	if delay > 0 {
		b["delay"] = delay.String()
	}
	body, _ := json.Marshal(b)
	var out struct{}
	return call(ctx, o, http.MethodPost, "ack", q, body, &out)
}

// setQuery sets the query parameters of o's subscription.
func setQuery(q url.Values, o Options) {
	for k, v := range map[string]string{"device": o.Device, "after": o.After, "from": o.From, "group": o.Group} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if o.Prefetch > 0 {
		q.Set("prefetch", strconv.Itoa(o.Prefetch))
	}
}

// call makes one request of a built-in push endpoint and decodes its
// JSON answer; a refusal is an *HTTPError.
func call(ctx context.Context, o Options, method, verb string, q url.Values, body []byte, out any) error {
	u, err := url.Parse(strings.TrimSuffix(o.Edge, "/"))
	if err != nil {
		return fmt.Errorf("edge URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%s is over HTTP: the edge is http:// or https://, not %s://", verb, u.Scheme)
	}
	u.Path += "/_jetway/" + verb + "/" + o.Topic
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, method, u.String(), bytes.NewReader(body))
	if err != nil {
		return err
	}
	for k, v := range o.Header {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	hc := o.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return refusal(resp, b)
	}
	return json.Unmarshal(b, out)
}

// Receipt is one write of a message to a client, as its publisher reads
// it.
type Receipt struct {
	Seq       uint64    `json:"seq"`
	App       string    `json:"app"`
	Device    string    `json:"device"`
	User      string    `json:"user"`
	Transport string    `json:"transport"`
	At        time.Time `json:"at"`
}

// Receipts reads the delivery receipts of message seq of o.Topic, which
// the app of o's credentials published with receipt=1 (GET
// /_jetway/receipts): one per subscriber it was written to.
func Receipts(ctx context.Context, o Options, seq uint64) ([]Receipt, error) {
	var out struct {
		Receipts []Receipt `json:"receipts"`
	}
	if err := call(ctx, o, http.MethodGet, "receipts", url.Values{"seq": {strconv.FormatUint(seq, 10)}}, nil, &out); err != nil {
		return nil, err
	}
	return out.Receipts, nil
}
