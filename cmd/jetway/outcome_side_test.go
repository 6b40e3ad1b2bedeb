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

// streamConfig is the config of a bucket's stream, to change.
func streamConfig(t *testing.T, js jetstream.JetStream, bucket string) jetstream.StreamConfig {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	return st.CachedInfo().Config
}

func setStream(t *testing.T, js jetstream.JetStream, cfg jetstream.StreamConfig) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
}

// The side writes (here json schema delete, secret put and delete) take
// the other writes' path on no answer: read back, exit 0 when it shows
// the write in force, 4 with the command to check with when it does not.
func TestSideWritesOutcomeUnknown(t *testing.T) {
	s := natstest.RunServer(t)
	url := s.ClientURL()
	secret := `{"url":"nats://partner:4222"}`
	for _, args := range [][]string{
		{"jsonschema", "put", "money", "-"},
		{"secret", "put", "partner", "-", "--pool", "orders"},
	} {
		stdin := `{"type":"number"}`
		if args[0] == "secret" {
			stdin = secret
		}
		if r := runCmd(stdin, append(args, "--nats", url)...); r.code != 0 {
			t.Fatalf("%v: %d %s%s", args, r.code, r.stdout, r.stderr)
		}
	}
	nc := natstest.Connect(t, s)
	js, _ := jetstream.New(nc)

	// Stored, never acked: the read-back shows the delete landed.
	cfg := streamConfig(t, js, registry.BucketJSONSchemas)
	cfg.NoAck = true
	setStream(t, js, cfg)
	r := runCmd("", "jsonschema", "delete", "money", "--nats", url, "--timeout", "1s")
	if r.code != 0 || !strings.Contains(r.stdout, "deleted json schema money (read back: it is gone)") {
		t.Fatalf("jsonschema delete, landed: exit %d, %s%s; want 0 and the read-back", r.code, r.stdout, r.stderr)
	}
	if r := runCmd("", "jsonschema", "get", "money", "--nats", url); r.code == 0 {
		t.Errorf("the schema is still there: %s", r.stdout)
	}

	// Taken by a server that never answers, the stream never seeing it:
	// unknown, exit 4, and the secret as it was.
	cfg = streamConfig(t, js, registry.BucketSecrets)
	held := cfg.Subjects
	cfg.Subjects = []string{"$KV." + registry.BucketSecrets + ".other.>"}
	setStream(t, js, cfg)
	hold, err := nc.SubscribeSync("$KV." + registry.BucketSecrets + ".partner.>")
	if err != nil {
		t.Fatal(err)
	}
	_ = nc.Flush()
	r = runCmd(`{"url":"nats://elsewhere:4222"}`, "secret", "put", "partner", "-", "--pool", "orders", "--nats", url, "--timeout", "1s")
	t.Logf("secret put: exit %d: %s%s", r.code, r.stdout, r.stderr)
	if r.code != exitUnknown || !strings.Contains(r.stderr, "outcome unknown") || !strings.Contains(r.stderr, "check with `jetway secret list --pool orders`") {
		t.Fatalf("secret put, held: exit %d, stderr %q; want exit %d, outcome unknown and the command to check with", r.code, r.stderr, exitUnknown)
	}
	_ = hold.Unsubscribe()

	// Stored again, never acked: the delete (a purge) reads back gone.
	cfg.Subjects, cfg.NoAck = held, true
	setStream(t, js, cfg)
	r = runCmd("", "secret", "delete", "partner", "--pool", "orders", "--nats", url, "--timeout", "1s")
	if r.code != 0 || !strings.Contains(r.stdout, "deleted secret partner.orders (read back: it is gone)") {
		t.Fatalf("secret delete, landed: exit %d, %s%s; want 0 and the read-back", r.code, r.stdout, r.stderr)
	}
}
