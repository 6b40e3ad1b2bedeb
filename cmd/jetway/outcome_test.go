package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/registry"
)

// A write that gets no answer is read back before the command says
// anything: shown in force, it succeeded (exit 0); not shown, its outcome
// is unknown (exit 4, "outcome unknown", the command to check with),
// never a plain failure (1): it may still land.
func TestWriteOutcomeUnknownExitCode(t *testing.T) {
	s := natstest.RunServer(t)
	url := s.ClientURL()
	if r := runCmd("", "degrade", "on", "orders", "--ahead", "--nats", url); r.code != 0 {
		t.Fatalf("degrade on: %d %s%s", r.code, r.stdout, r.stderr)
	}
	nc := natstest.Connect(t, s)
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "KV_"+registry.BucketFlags)
	if err != nil {
		t.Fatal(err)
	}

	// The stream stores writes but answers none (no_ack): a write that
	// landed though its answer never came.
	cfg := st.CachedInfo().Config
	cfg.NoAck = true
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	r := runCmd("", "degrade", "on", "orders", "--ahead", "--reason", "late", "--nats", url, "--timeout", "1s")
	if r.code != 0 || !strings.Contains(r.stdout, "read back: the write landed") {
		t.Fatalf("landed: exit %d, %s%s; want 0 and the read-back", r.code, r.stdout, r.stderr)
	}

	// A server that takes the write and never answers, the stream never
	// seeing it (as a leader that lost quorum holds a proposal): unknown.
	cfg.NoAck = false
	cfg.Subjects = []string{"$KV." + registry.BucketFlags + ".fault.>"}
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	hold, err := nc.SubscribeSync("$KV." + registry.BucketFlags + ".degrade.>")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hold.Unsubscribe() }()
	_ = nc.Flush()
	start := time.Now()
	r = runCmd("", "degrade", "on", "orders", "--ahead", "--reason", "held", "--nats", url, "--timeout", "1s")
	t.Logf("exit %d after %v: %s%s", r.code, time.Since(start), r.stdout, r.stderr)
	if r.code != exitUnknown || !strings.Contains(r.stderr, "outcome unknown") || !strings.Contains(r.stderr, "check with `jetway degrade list`") {
		t.Fatalf("exit %d, stderr %q; want exit %d, outcome unknown and the command to check with", r.code, r.stderr, exitUnknown)
	}
}
