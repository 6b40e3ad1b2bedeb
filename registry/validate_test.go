package registry_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jetway-gw/jetway/bus/natstest"
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

// A shared schema change that would break what uses it is refused: a put
// that drops a fragment an API references, a put whose own reference is
// not stored, a delete of a schema used through another one or through an
// escaped name.
func TestSharedSchemaChangesKeepUsersCompiling(t *testing.T) {
	ctx := context.Background()
	c, err := registry.NewClient(ctx, natstest.Connect(t, natstest.RunServer(t)), registry.BucketOptions{})
	if err != nil {
		t.Fatal(err)
	}
	put := func(name, doc string) error { _, err := c.PutJSONSchema(ctx, name, []byte(doc)); return err }
	if err := put("money", `{"$defs":{"cents":{"type":"integer","minimum":1}}}`); err != nil {
		t.Fatal(err)
	}
	if err := put("base", `{"properties":{"amount":{"$ref":"jetway:money#/$defs/cents"}}}`); err != nil {
		t.Fatal(err)
	}
	if err := put("broken", `{"$ref":"jetway:nope"}`); err == nil {
		t.Fatal("a shared schema referencing a missing one was stored")
	}
	if _, err := c.Put(ctx, []byte(`{"name":"pay","pool":"p","route":{"method":"POST","path":"/pay"},"backend":{"type":"mock"},
		"validate":{"body":{"$ref":"jetway:mone\u0079#/$defs/cents"}}}`)); err != nil {
		t.Fatal(err)
	}
	if err := put("money", `{}`); err == nil || !strings.Contains(err.Error(), "api pay") || !strings.Contains(err.Error(), "json schema base") {
		t.Fatalf("a put dropping a used fragment: %v", err)
	}
	if err := c.DeleteJSONSchema(ctx, "money"); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("delete of a used schema: %v", err)
	}
	if err := c.Delete(ctx, "pay"); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteJSONSchema(ctx, "money"); err == nil || !strings.Contains(err.Error(), "json schema base") {
		t.Fatalf("delete of a schema another one uses: %v", err)
	}
	if err := c.DeleteJSONSchema(ctx, "base"); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteJSONSchema(ctx, "money"); err != nil {
		t.Fatal(err)
	}
}

// A classify block with a status that is none, or a condition that does
// not compile, is refused at publish.
func TestParseAPIClassify(t *testing.T) {
	const head = `{"name":"c","pool":"p","route":{"path":"/c"},"backend":{"type":"mock"},`
	for _, c := range []string{`{"failure_statuses":["6xx"]}`, `{"failure_statuses":["503-500"]}`, `{"failure_when":"response.json.code !="}`, `{"slow":"-1s"}`} {
		if _, err := registry.ParseAPI("", []byte(head+`"classify":`+c+`}`)); err == nil {
			t.Errorf("accepted: %s", c)
		}
	}
	a, err := registry.ParseAPI("", []byte(head+`"classify":{"failure_statuses":["5xx","429","400-404"],"failure_when":"response.status == 200 && response.json.code != 0","slow":"2s"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Classify.StatusRanges(); len(got) != 3 || got[0] != [2]int{500, 599} || got[2] != [2]int{400, 404} {
		t.Fatalf("%v", got)
	}
}

// A request header a rewrite sets on a cached API must be keyed: the
// backend of a cached call gets only keyed headers.
func TestParseAPICacheRewriteHeaders(t *testing.T) {
	const head = `{"name":"c","pool":"p","route":{"path":"/c"},"backend":{"type":"mock"},"cache":{"ttl":"1s","key":{"headers":["X-Keyed"]}},`
	if _, err := registry.ParseAPI("", []byte(head+`"rewrite":{"request":{"headers":{"set":{"X-Tenant":"a"}}}}}`)); err == nil || !strings.Contains(err.Error(), "X-Tenant is not in cache.key.headers") {
		t.Fatalf("an unkeyed rewritten header: %v", err)
	}
	if _, err := registry.ParseAPI("", []byte(head+`"rewrite":{"request":{"headers":{"set":{"x-keyed":"a"}}}}}`)); err != nil {
		t.Fatal(err)
	}
}
