package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
)

// changeWebhookConsumer is the durable consumer of the audit trail that
// delivers changes to --change-webhook: where it stopped survives a
// restart, so a change is posted at least once.
const changeWebhookConsumer = "jetway-change-webhook"

// changeWebhookTimeout bounds one POST; changeWebhookBackoff the pauses
// before a change refused (or not answered) is posted again.
var (
	changeWebhookTimeout = 5 * time.Second
	changeWebhookBackoff = []time.Duration{time.Second, 5 * time.Second, 30 * time.Second, 2 * time.Minute, 10 * time.Minute}
)

// checkWebhookURL refuses a webhook that is not an absolute http(s) URL.
func checkWebhookURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return fmt.Errorf("%q is not an http(s) URL without credentials", raw)
	}
	return nil
}

// deliverChanges POSTs every registry change recorded in the audit trail
// from now on to hook, one at a time and in order (the body is the
// registry.Change JSON; Jetway-Change-Seq its place in the trail). A change
// the hook refuses (not 2xx) or does not answer in time is posted again
// after a growing pause, up to len(changeWebhookBackoff)+1 times, then
// dropped with an error logged. Runs until ctx ends.
func deliverChanges(ctx context.Context, js jetstream.JetStream, hook string, log *slog.Logger) error {
	st, err := js.Stream(ctx, bus.StreamAudit)
	if err != nil {
		return fmt.Errorf("change webhook: the audit trail: %w", err)
	}
	cons, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:       changeWebhookConsumer,
		Description:   "Jetway: registry changes to --change-webhook",
		DeliverPolicy: jetstream.DeliverNewPolicy, // kept from the consumer's creation on
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       changeWebhookTimeout + 5*time.Second,
		MaxDeliver:    len(changeWebhookBackoff) + 1,
		MaxAckPending: 1, // in order, one at a time
	})
	if err != nil {
		return fmt.Errorf("change webhook: %w", err)
	}
	client := &http.Client{Timeout: changeWebhookTimeout}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		md, err := m.Metadata()
		if err != nil {
			_ = m.Term()
			return
		}
		if err := postChange(ctx, client, hook, m.Data(), md.Sequence.Stream); err != nil {
			n := int(md.NumDelivered)
			if n > len(changeWebhookBackoff) {
				log.Error("change webhook gave up on a change", "seq", md.Sequence.Stream, "attempts", n, "err", err)
				_ = m.Term()
				return
			}
			log.Warn("change webhook failed; posting again later", "seq", md.Sequence.Stream, "attempt", n, "err", err)
			_ = m.NakWithDelay(changeWebhookBackoff[n-1])
			return
		}
		_ = m.Ack()
	})
	if err != nil {
		return fmt.Errorf("change webhook: %w", err)
	}
	<-ctx.Done()
	cc.Stop()
	return nil
}

func postChange(ctx context.Context, client *http.Client, hook string, body []byte, seq uint64) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, hook, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Jetway-Change-Seq", fmt.Sprint(seq))
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return errors.New("answered " + resp.Status)
	}
	return nil
}
