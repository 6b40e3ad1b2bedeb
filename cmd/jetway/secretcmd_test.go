package main

import (
	"strings"
	"testing"

	"github.com/jetway-gw/jetway/bus/natstest"
)

// jetway secret: a bad value writes nothing, list and the audit trail
// never show a value, and put and delete need the pool.
func TestSecretCommands(t *testing.T) {
	s := natstest.RunServer(t)
	url := s.ClientURL()
	if r := runCmd(`{"url":"nats://h:4222","user":"u"}`, "secret", "put", "partner", "-", "--pool", "orders", "--nats", url); r.code != 1 || !strings.Contains(r.stderr, "come together") {
		t.Fatalf("a bad secret: exit %d: %s", r.code, r.stderr)
	}
	if r := runCmd(`{}`, "secret", "put", "partner", "-", "--nats", url); r.code != 2 || !strings.Contains(r.stderr, "--pool") {
		t.Fatalf("put without --pool: exit %d: %s", r.code, r.stderr)
	}
	if r := runCmd(`{}`, "secret", "put", "Partner.x", "-", "--pool", "orders", "--nats", url); r.code != 2 {
		t.Fatalf("a name with a dot: exit %d: %s", r.code, r.stderr)
	}
	value := `{"url":"nats://partner:4222","user":"jetway","password":"hunter2-secret"}`
	if r := runCmd(value, "secret", "put", "partner", "-", "--pool", "orders", "--nats", url); r.code != 0 || !strings.Contains(r.stdout, "stored secret partner of pool orders") {
		t.Fatalf("put: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	for _, args := range [][]string{
		{"secret", "list", "--nats", url},
		{"secret", "list", "--pool", "orders", "--nats", url},
	} {
		r := runCmd("", args...)
		if r.code != 0 || !strings.Contains(r.stdout, "orders  partner") {
			t.Fatalf("%v: exit %d: %s%s", args, r.code, r.stdout, r.stderr)
		}
		if strings.Contains(r.stdout, "hunter2") {
			t.Fatalf("list printed the password: %s", r.stdout)
		}
	}
	if r := runCmd("", "secret", "list", "--pool", "eu", "--nats", url); r.code != 0 || strings.Contains(r.stdout, "partner") {
		t.Fatalf("another pool's list: %s", r.stdout)
	}
	if r := runCmd("", "audit", "--kind", "secret", "--nats", url); r.code != 0 || !strings.Contains(r.stdout, "partner.orders") || strings.Contains(r.stdout, "hunter2") {
		t.Fatalf("audit: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	if r := runCmd("", "secret", "delete", "partner", "--pool", "orders", "--nats", url); r.code != 0 {
		t.Fatalf("delete: exit %d: %s", r.code, r.stderr)
	}
	if r := runCmd("", "secret", "delete", "partner", "--pool", "orders", "--nats", url); r.code != 1 || !strings.Contains(r.stderr, "not found") {
		t.Fatalf("delete twice: exit %d: %s", r.code, r.stderr)
	}
}
