package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/jetway-gw/jetway/bus/natstest"
)

// An API's owner through the CLI: api put takes it, api get shows it, a
// bad one is refused naming the field, and the report groups by it.
func TestAPIOwnerCLI(t *testing.T) {
	s := natstest.RunServer(t)
	jw := func(stdin string, args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(append(args, "--nats", s.ClientURL()), strings.NewReader(stdin), &out, &errb)
		return code, out.String(), errb.String()
	}
	if code, out, errs := jw(`{"name":"pay.get","pool":"pay","owner":"Team Payments","route":{"path":"/pay"},"backend":{"type":"mock"}}`, "api", "put", "-"); code != 0 {
		t.Fatalf("put: %d %s %s", code, out, errs)
	}
	if code, out, errs := jw(`{"name":"old.get","pool":"old","route":{"path":"/old"},"backend":{"type":"mock"}}`, "api", "put", "-"); code != 0 {
		t.Fatalf("put without owner: %d %s %s", code, out, errs)
	}
	if code, out, errs := jw("", "api", "get", "pay.get"); code != 0 || !strings.Contains(out, `"owner": "Team Payments"`) {
		t.Fatalf("get: %d %s %s", code, out, errs)
	}
	if code, out, errs := jw(`{"name":"bad.get","pool":"bad","owner":"a\tb","route":{"path":"/bad"},"backend":{"type":"mock"}}`, "api", "put", "-"); code == 0 || !strings.Contains(errs, "owner") {
		t.Fatalf("a bad owner: %d %s %s", code, out, errs)
	}
}
