package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/jetway-gw/jetway/bus/natstest"
)

// channel list shows each channel (available until a controller judges
// it) and the operator's overrides; cut and restore write them; an API
// without channels, or a channel it lacks, is refused by name.
func TestChannelCommand(t *testing.T) {
	url := natstest.RunServer(t).ClientURL()
	jw := func(stdin string, args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := run(append(args, "--nats", url), strings.NewReader(stdin), &out, &errb)
		return code, out.String() + errb.String()
	}
	if code, out := jw(`{"name":"sms","pool":"p","route":{"path":"/sms"},"channels":[
		{"name":"carrier-a","backend":{"type":"mock"}},{"name":"carrier-b","backend":{"type":"mock"},"backup":true}]}`, "api", "put", "-"); code != 0 {
		t.Fatalf("api put: %d %s", code, out)
	}
	if code, out := jw(`{"name":"plain","pool":"p","route":{"path":"/plain"},"backend":{"type":"mock"}}`, "api", "put", "-"); code != 0 {
		t.Fatalf("api put: %d %s", code, out)
	}
	if code, out := jw("", "api", "list"); code != 0 || !strings.Contains(out, "channels carrier-a,carrier-b") {
		t.Fatalf("api list: %d %s", code, out)
	}
	if code, out := jw("", "channel", "list", "sms"); code != 0 || !strings.Contains(out, "carrier-a") || !strings.Contains(out, "available") {
		t.Fatalf("list: %d %s", code, out)
	}
	if code, out := jw("", "channel", "cut", "sms", "carrier-a", "--reason", "carrier outage"); code != 0 {
		t.Fatalf("cut: %d %s", code, out)
	}
	if code, out := jw("", "channel", "list", "sms"); code != 0 || !strings.Contains(out, "cut by ") {
		t.Fatalf("list after cut: %d %s", code, out)
	}
	if code, out := jw("", "audit", "--kind", "channel"); code != 0 || !strings.Contains(out, "sms/carrier-a") || !strings.Contains(out, "cut") {
		t.Fatalf("audit of the cut: %d %s", code, out)
	}
	if code, out := jw("", "channel", "show", "sms"); code != 0 || !strings.Contains(out, `"reason": "carrier outage"`) {
		t.Fatalf("show: %d %s", code, out)
	}
	if code, out := jw("", "channel", "restore", "sms", "carrier-a"); code != 0 {
		t.Fatalf("restore: %d %s", code, out)
	}
	if code, out := jw("", "channel", "list", "sms"); code != 0 || strings.Contains(out, "cut by") {
		t.Fatalf("list after restore: %d %s", code, out)
	}
	if code, out := jw("", "channel", "cut", "sms", "carrier-z"); code == 0 || !strings.Contains(out, `no channel "carrier-z"`) {
		t.Fatalf("cut of an unknown channel: %d %s", code, out)
	}
	if code, out := jw("", "channel", "list", "plain"); code == 0 || !strings.Contains(out, "has no channels") {
		t.Fatalf("list of an api without channels: %d %s", code, out)
	}
	if code, out := jw("", "channel", "history", "sms"); code != 0 || !strings.Contains(out, "CHANNEL") {
		t.Fatalf("history: %d %s", code, out)
	}
}

// release start waits for the controller: with none running (no worker),
// it says the command was sent but not applied, naming the pool.
func TestReleaseCommandWithoutController(t *testing.T) {
	url := natstest.RunServer(t).ClientURL()
	jw := func(stdin string, args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := run(append(args, "--nats", url), strings.NewReader(stdin), &out, &errb)
		return code, out.String() + errb.String()
	}
	if code, out := jw(`{"name":"shop","pool":"web","route":{"path":"/shop"},"channels":[
		{"name":"v1","backend":{"type":"mock"}},{"name":"v2","backend":{"type":"mock"}}],"release":{"canary":"v2"}}`, "api", "put", "-"); code != 0 {
		t.Fatalf("api put: %d %s", code, out)
	}
	if code, out := jw("", "release", "start", "shop", "--wait", "300ms"); code != 0 || !strings.Contains(out, "not applied within 300ms: is a worker of pool web running?") {
		t.Fatalf("release start: %d %s", code, out)
	}
	if code, out := jw("", "release", "status", "shop"); code != 0 || !strings.Contains(out, "pending (no controller has stepped it yet)") {
		t.Fatalf("release status: %d %s", code, out)
	}
	if code, out := jw("", "release", "explode", "shop"); code != 2 {
		t.Fatalf("an unknown command: %d %s", code, out)
	}
}
