package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/jetway-gw/jetway/bus/natstest"
)

// fault on writes a drill the list shows, refuses one for an API that is
// not published (without --ahead) or without a fault, and off ends it.
func TestFaultCommand(t *testing.T) {
	url := natstest.RunServer(t).ClientURL()
	jw := func(stdin string, args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := run(append(args, "--nats", url), strings.NewReader(stdin), &out, &errb)
		return code, out.String() + errb.String()
	}
	if code, out := jw("", "fault", "on", "pay", "--abort", "503", "--percent", "10"); code == 0 || !strings.Contains(out, "not published") {
		t.Fatalf("on for an unpublished api: %d %s", code, out)
	}
	if code, out := jw(`{"name":"pay","pool":"p","route":{"path":"/pay"},"backend":{"type":"mock"}}`, "api", "put", "-"); code != 0 {
		t.Fatalf("api put: %d %s", code, out)
	}
	if code, out := jw("", "fault", "on", "pay"); code != 2 {
		t.Fatalf("on without a fault: %d %s", code, out)
	}
	if code, out := jw("", "fault", "on", "pay", "--sandbox", "--abort", "503"); code == 0 || !strings.Contains(out, "no sandbox tier") {
		t.Fatalf("--sandbox on an api without one: %d %s", code, out)
	}
	if code, out := jw("", "fault", "on", "pay", "--abort", "503", "--percent", "10", "--delay", "100ms-2s", "--delay-percent", "50",
		"--app", "shop", "--header", "X-Drill: 1", "--for", "30m", "--reason", "game day"); code != 0 || !strings.Contains(out, "delay 100ms-2s 50%, abort 503 10%") {
		t.Fatalf("on: %d %s", code, out)
	}
	if code, out := jw("", "fault", "list"); code != 0 || !strings.Contains(out, "pay") || !strings.Contains(out, "game day") || !strings.Contains(out, " on ") {
		t.Fatalf("list: %d %s", code, out)
	}
	if code, out := jw("", "degrade", "list"); code != 0 || strings.Contains(out, "pay") {
		t.Fatalf("degrade list shows the drill: %d %s", code, out)
	}
	if code, out := jw("", "fault", "on", "pay", "--abort", "503", "--for", "200h"); code == 0 || !strings.Contains(out, "at most") {
		t.Fatalf("a drill of 200h: %d %s", code, out)
	}
	if code, out := jw("", "fault", "off", "pay"); code != 0 {
		t.Fatalf("off: %d %s", code, out)
	}
	if code, out := jw("", "fault", "list"); code != 0 || strings.Contains(out, "pay") {
		t.Fatalf("list after off: %d %s", code, out)
	}
}
