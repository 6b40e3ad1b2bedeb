package edge_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/registry"
)

type problemsReply struct {
	Code     string `json:"code"`
	Problems []struct {
		Pointer, Rule, Message string
	} `json:"problems"`
}

func problemsOf(t *testing.T, body string) problemsReply {
	t.Helper()
	var p problemsReply
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatalf("not a problems body: %q", body)
	}
	return p
}

// A request that fails its API's schemas is refused at the edge with every
// problem and never reaches a worker; one that passes reaches the backend
// as the caller sent it. A shared schema's change applies on the edge
// without republishing the API; the sandbox tier tries its own schema.
func TestValidation(t *testing.T) {
	backend := newTierBackend(t, "ok")
	g := newGateway(t)
	ctx := context.Background()
	if _, err := g.Client.PutJSONSchema(ctx, "money", []byte(`{"type":"object","required":["amount"],"properties":{"amount":{"type":"integer","minimum":1}}}`)); err != nil {
		t.Fatal(err)
	}
	liveKey := g.PutKeyedApp("live")
	testKey, testRec, _ := registry.NewAPIKey()
	g.PutApps(&registry.App{ID: "tester", Status: registry.AppActive, Keys: []registry.AppKey{testRec}, APIs: []string{"*"}, Sandbox: true})
	g.Publish(`{"name":"pay","pool":"p","route":{"method":"POST","path":"/pay/{account}"},
		"backend":{"type":"http","url":"` + backend.URL + `/pay/{account}"},"auth":{"methods":["key"]},
		"validate":{"body":{"allOf":[{"$ref":"jetway:money"}],"properties":{"currency":{"enum":["EUR"]}}},
			"params":{"properties":{"account":{"pattern":"^[0-9]{4}$"}}},
			"headers":{"required":["x-tenant"]},"status":422,
			"messages":{"/body/amount":"amount is a whole number of cents, at least 1"}},
		"sandbox":{"backend":{"type":"http","url":"` + backend.URL + `/sb/{account}"},"validate":{"body":{"required":["v2"]}}}}`)

	post := func(path, body, key string, hdr ...string) (int, string) {
		r := g.Do("POST", path, strings.NewReader(body), append([]string{"X-Api-Key", key, "Content-Type", "application/json"}, hdr...)...)
		return r.Status, r.Body
	}
	status, body := post("/pay/12x", `{"amount":0,"currency":"USD"}`, liveKey)
	p := problemsOf(t, body)
	var got []string
	for _, pr := range p.Problems {
		got = append(got, pr.Pointer+" "+pr.Rule)
	}
	if status != 422 || p.Code != "INVALID_REQUEST" || strings.Join(got, ",") != "/params/account pattern,/headers/x-tenant required,/body/amount minimum,/body/currency enum" {
		t.Fatalf("%d %s", status, body)
	}
	if p.Problems[2].Message != "amount is a whole number of cents, at least 1" {
		t.Errorf("entry's message not used: %+v", p.Problems[2])
	}
	if n := len(backend.calls()); n != 0 {
		t.Fatalf("an invalid request reached the backend (%d calls)", n)
	}
	if status, body := post("/pay/1234", `{"amount":5,"currency":"EUR"}`, liveKey, "X-Tenant", "t1"); status != 200 || body != "ok" {
		t.Fatalf("a valid request: %d %s", status, body)
	}
	// Duplicate keys: the schema would see 5, a first-key parser 0.
	if status, body := post("/pay/1234", `{"amount":0,"amount":5}`, liveKey, "X-Tenant", "t1"); status != 422 || !strings.Contains(body, "duplicate") {
		t.Fatalf("a body with a key twice: %d %s", status, body)
	}

	// The shared schema changes: every edge recompiles the API's check.
	if _, err := g.Client.PutJSONSchema(ctx, "money", []byte(`{"type":"object","required":["amount"],"properties":{"amount":{"type":"integer","minimum":10}}}`)); err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 3*time.Second, 5*time.Millisecond, func() error {
		if status, body := post("/pay/1234", `{"amount":5}`, liveKey, "X-Tenant", "t1"); status != 422 {
			return &json.UnsupportedValueError{Str: body}
		}
		return nil
	})

	// The sandbox tier's own schema: v2 required there, not in production.
	if status, body := post("/pay/1234", `{"amount":50}`, testKey, "X-Tenant", "t1"); status != 400 || !strings.Contains(body, `"/body/v2"`) {
		t.Fatalf("sandbox: %d %s", status, body)
	}
	if status, _ := post("/pay/1234", `{"v2":true}`, testKey); status != 200 {
		t.Fatalf("sandbox, valid: %d", status)
	}

	// Deleting a schema an API references is refused; api put refuses a
	// reference to a schema that is not stored.
	if err := g.Client.DeleteJSONSchema(ctx, "money"); err == nil || !strings.Contains(err.Error(), "pay") {
		t.Fatalf("delete of a referenced schema: %v", err)
	}
	_, err := g.Client.Put(ctx, []byte(`{"name":"other","pool":"p","route":{"path":"/other"},"backend":{"type":"mock"},"validate":{"query":{"$ref":"jetway:nope"}}}`))
	if err == nil || !strings.Contains(err.Error(), `no shared schema "nope"`) {
		t.Fatalf("a reference to a missing schema: %v", err)
	}
}

// A huge body of many problems gets a bounded answer: the first problems
// and the count of the others.
func TestValidationBoundsProblems(t *testing.T) {
	g := newGateway(t)
	g.Publish(`{"name":"bulk","pool":"p","route":{"method":"POST","path":"/bulk"},"backend":{"type":"mock"},
		"validate":{"body":{"type":"array","items":{"type":"integer"}}}}`)
	items := strings.Repeat(`"x",`, 5000) + `"x"`
	r := g.Do("POST", "/bulk", strings.NewReader("["+items+"]"), "Content-Type", "application/json")
	var p struct {
		Problems []any `json:"problems"`
		More     int   `json:"more_problems"`
	}
	if err := json.Unmarshal([]byte(r.Body), &p); err != nil || r.Status != http.StatusBadRequest {
		t.Fatalf("%d %.200s", r.Status, r.Body)
	}
	if len(p.Problems) != 100 || p.More != 4901 {
		t.Fatalf("%d problems listed, %d more", len(p.Problems), p.More)
	}
}
