package registry_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/jetway-gw/jetway/registry"
)

// An entry whose validation schemas are not valid JSON Schema, or that
// reference anything but a shared schema, is refused at publish with every
// problem at its place; a good one parses, and the sandbox tier takes its
// own validation or else production's.
func TestParseAPIValidate(t *testing.T) {
	const head = `{"name":"orders.create","pool":"p","route":{"method":"POST","path":"/orders/{id}"},"backend":{"type":"mock"},`
	_, err := registry.ParseAPI("", []byte(head+`"validate":{"body":{"type":"nonsense"},"query":{"$ref":"file:///etc/passwd"},"status":500,"messages":{"amount":"x"}}}`))
	var ve *registry.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("bad schemas: %v", err)
	}
	text := err.Error()
	for _, want := range []string{"validate.body", "validate.query", "only jetway:NAME", "validate.status", "validate.messages"} {
		if !strings.Contains(text, want) {
			t.Errorf("problems %q lack %q", text, want)
		}
	}
	a, err := registry.ParseAPI("", []byte(head+`"auth":{"methods":["key"]},"validate":{"body":{"$ref":"jetway:order"},"messages":{"/body/amount":"x"}},
		"sandbox":{"backend":{"type":"mock"},"validate":{"body":{"type":"object"}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if a.Validate == nil || a.SandboxAPI().Validate == a.Validate || a.SandboxAPI().Validate == nil {
		t.Fatal("sandbox tier does not take its own validation")
	}
	a, err = registry.ParseAPI("", []byte(head+`"auth":{"methods":["key"]},"validate":{"params":{"type":"object"}},"sandbox":{"backend":{"type":"mock"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if a.SandboxAPI().Validate != a.Validate {
		t.Fatal("sandbox tier without validation of its own does not take production's")
	}
}
