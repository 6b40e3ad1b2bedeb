package main

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/registry"
)

// A write that got no answer and is read back in force is settled before
// the command exits 0: its audit record is written (marked settled by
// read-back). One whose follow-up cannot be done — an app created whose
// API key was never shown — exits 1 saying so, the app recorded all the
// same.
func TestSettledWriteIsAudited(t *testing.T) {
	s := natstest.RunServer(t)
	url := s.ClientURL()
	if r := runCmd("", "degrade", "off", "orders", "--ahead", "--nats", url); r.code != 0 {
		t.Fatalf("degrade off: %d %s%s", r.code, r.stdout, r.stderr)
	}
	nc := natstest.Connect(t, s)
	js, _ := jetstream.New(nc)
	for _, b := range []string{registry.BucketFlags, registry.BucketApps} {
		cfg := streamConfig(t, js, b)
		cfg.NoAck = true
		setStream(t, js, cfg)
	}

	r := runCmd("", "degrade", "on", "orders", "--ahead", "--reason", "late", "--nats", url, "--timeout", "1s")
	if r.code != 0 || !strings.Contains(r.stdout, "read back: the write landed") {
		t.Fatalf("degrade on, landed: exit %d, %s%s; want 0 and the read-back", r.code, r.stdout, r.stderr)
	}
	r = runCmd("", "audit", "--kind", "degrade", "--nats", url)
	if r.code != 0 || strings.Count(r.stdout, "orders") != 2 || !strings.Contains(r.stdout, "(settled by read-back)") {
		t.Fatalf("audit: exit %d, %s%s; want both writes, the second settled by read-back", r.code, r.stdout, r.stderr)
	}

	r = runCmd("", "app", "create", "shop", "--nats", url, "--timeout", "1s")
	t.Logf("app create: exit %d: %s%s", r.code, r.stdout, r.stderr)
	if r.code != 1 || !strings.Contains(r.stderr, "never shown") || !strings.Contains(r.stderr, "rotate-key shop") {
		t.Fatalf("app create, landed: exit %d, stderr %q; want 1 and the key never shown", r.code, r.stderr)
	}
	r = runCmd("", "audit", "--kind", "app", "--nats", url)
	if r.code != 0 || !strings.Contains(r.stdout, "shop") || !strings.Contains(r.stdout, "(settled by read-back)") {
		t.Fatalf("audit: exit %d, %s%s; want the app, settled by read-back", r.code, r.stdout, r.stderr)
	}
}
