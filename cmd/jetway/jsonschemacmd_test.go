package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/jetway-gw/jetway/bus/natstest"
)

// jsonschema put checks a schema and stores it (YAML too), get prints it,
// list shows it, delete refuses while an API references it.
func TestJSONSchemaCommand(t *testing.T) {
	url := natstest.RunServer(t).ClientURL()
	jw := func(stdin string, args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := run(append(args, "--nats", url), strings.NewReader(stdin), &out, &errb)
		return code, out.String() + errb.String()
	}
	if code, out := jw("type: object\nrequired: [amount]\n", "jsonschema", "put", "money", "-"); code != 0 || !strings.Contains(out, `"jetway:money"`) {
		t.Fatalf("put: %d %s", code, out)
	}
	if code, out := jw(`{"type":"nonsense"}`, "jsonschema", "put", "bad", "-"); code == 0 || !strings.Contains(out, "schema is invalid") {
		t.Fatalf("put of an invalid schema: %d %s", code, out)
	}
	if code, out := jw("", "jsonschema", "get", "money"); code != 0 || !strings.Contains(out, `"required":["amount"]`) {
		t.Fatalf("get: %d %s", code, out)
	}
	if code, out := jw(`{"name":"pay","pool":"p","route":{"method":"POST","path":"/pay"},"backend":{"type":"mock"},"validate":{"body":{"$ref":"jetway:money"}}}`, "api", "put", "-"); code != 0 {
		t.Fatalf("api put: %d %s", code, out)
	}
	if code, out := jw("", "jsonschema", "list"); code != 0 || !strings.Contains(out, "money") || strings.Contains(out, "bad") {
		t.Fatalf("list: %d %s", code, out)
	}
	if code, out := jw("", "jsonschema", "delete", "money"); code == 0 || !strings.Contains(out, "api pay") {
		t.Fatalf("delete of a referenced schema: %d %s", code, out)
	}
	if code, out := jw("", "jsonschema", "get", "no/such"); code != 2 {
		t.Fatalf("a bad name: %d %s", code, out)
	}
}
