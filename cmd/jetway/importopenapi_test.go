package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jetway-gw/jetway/internal/jetwaytest"
	"github.com/jetway-gw/jetway/registry"
)

// An OpenAPI 3.0 document in YAML, with what import-openapi carries over
// (parameters of each place, a required JSON body with components,
// nullable, a boolean exclusiveMinimum, a parameter name no route takes)
// and what it cannot (a parameter inside a segment, an optional body).
const petstore = `openapi: 3.0.3
info: {title: Pet Store, version: 1.0.0}
servers: [{url: "http://pets.invalid/v1"}]
paths:
  /pets:
    get:
      operationId: listPets
      parameters:
        - {name: limit, in: query, required: true, schema: {type: integer, maximum: 100}}
        - {name: tags, in: query, schema: {type: array, items: {type: string, enum: [dog, cat]}}}
        - {$ref: "#/components/parameters/Tenant"}
    post:
      operationId: createPet
      requestBody:
        required: true
        content:
          application/json:
            schema: {$ref: "#/components/schemas/NewPet"}
  /pets/{pet-id}:
    parameters:
      - {name: pet-id, in: path, required: true, schema: {type: integer}}
    get:
      operationId: showPetById
    put:
      operationId: updatePet
      requestBody:
        content:
          application/json:
            schema: {$ref: "#/components/schemas/NewPet"}
  /files/{name}.json:
    get: {operationId: getFile}
components:
  parameters:
    Tenant: {name: X-Tenant, in: header, required: true, schema: {type: string, pattern: "^[a-z]+$"}}
  schemas:
    NewPet:
      type: object
      required: [name, price]
      properties:
        name: {type: string, minLength: 1}
        price: {type: number, minimum: 0, exclusiveMinimum: true}
        tag: {type: string, nullable: true}
        owner: {$ref: "#/components/schemas/Owner"}
      additionalProperties: false
    Owner:
      type: object
      properties: {email: {type: string, format: email}}
`

// import-openapi makes one keyed draft per operation that a sandbox app
// calls on the backend, each checked against its operation: a request
// that breaks the document never reaches the backend.
func TestImportOpenAPI(t *testing.T) {
	var seen []string
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		seen = append(seen, r.Method+" "+r.URL.RequestURI()+" "+string(b))
		fmt.Fprint(w, "ok")
	}))
	t.Cleanup(be.Close)
	drafts, warnings, err := openAPIDrafts([]byte(petstore), openAPIOptions{backend: be.URL + "/v1/", prefix: "/petstore"})
	if err != nil {
		t.Fatal(err)
	}
	w := strings.Join(warnings, "\n")
	for _, want := range []string{`GET /files/{name}.json skipped: segment "{name}.json"`, "PUT /pets/{pet-id}: the request body is optional"} {
		if !strings.Contains(w, want) {
			t.Errorf("warnings lack %q:\n%s", want, w)
		}
	}
	if len(drafts) != 4 {
		t.Fatalf("%d drafts:\n%s", len(drafts), w)
	}

	g := jetwaytest.Start(t)
	var out, errb bytes.Buffer
	if err := putDrafts(context.Background(), g.Client, drafts, false, "petstore", &out, &errb); err != nil {
		t.Fatalf("%v\n%s", err, errb.String())
	}
	waitDrafts(g, drafts)
	if !strings.Contains(out.String(), "wrote draft.pet-store.createPet (POST /petstore/pets -> "+be.URL+"/v1/pets, sandbox apps only)") {
		t.Errorf("output:\n%s", out.String())
	}
	key, rec, err := registry.NewAPIKey()
	if err != nil {
		t.Fatal(err)
	}
	g.PutApps(&registry.App{ID: "tester", Status: registry.AppActive, Keys: []registry.AppKey{rec}, APIs: []string{"*"}, Sandbox: true})
	prod := g.PutKeyedApp("prod")

	call := func(k, method, path, body string, hdr ...string) jetwaytest.Result {
		return g.Do(method, path, strings.NewReader(body), append([]string{"X-Api-Key", k, "Content-Type", "application/json"}, hdr...)...)
	}
	// Production apps find nothing there: the APIs are drafts.
	if r := call(prod, "GET", "/petstore/pets/7", ""); r.Status != 404 || r.Code != "ROUTE_NOT_FOUND" {
		t.Errorf("production: %d %s", r.Status, r.Body)
	}
	for _, c := range []struct {
		method, path, body string
		hdr                []string
		status             int
		problem            string
	}{
		{"GET", "/petstore/pets?limit=5&tags=dog&tags=cat", "", []string{"X-Tenant", "acme"}, 200, ""},
		{"GET", "/petstore/pets?limit=five", "", []string{"X-Tenant", "acme"}, 400, "/query/limit"},
		{"GET", "/petstore/pets?limit=5&limit=6", "", []string{"X-Tenant", "acme"}, 400, "/query/limit"},
		{"GET", "/petstore/pets?limit=5&tags=cow", "", []string{"X-Tenant", "acme"}, 400, "/query/tags"},
		{"GET", "/petstore/pets?limit=5", "", []string{"X-Tenant", "ACME"}, 400, "/headers/x-tenant"},
		{"GET", "/petstore/pets?limit=5", "", nil, 400, "/headers/x-tenant"},
		{"GET", "/petstore/pets/7", "", nil, 200, ""},
		{"GET", "/petstore/pets/seven", "", nil, 400, "/params/pet_id"},
		{"POST", "/petstore/pets", `{"name":"rex","price":3,"tag":null,"owner":{"email":"a@b.example"}}`, nil, 200, ""},
		{"POST", "/petstore/pets", `{"name":"rex","price":0}`, nil, 400, "/body/price"},
		{"POST", "/petstore/pets", `{"name":"rex","price":1,"owner":{"email":"nope"}}`, nil, 400, "/body/owner/email"},
		{"POST", "/petstore/pets", `{"name":"rex","price":1,"extra":1}`, nil, 400, "/body"},
		{"PUT", "/petstore/pets/7", `{"anything":true}`, nil, 200, ""},
	} {
		r := call(key, c.method, c.path, c.body, c.hdr...)
		if r.Status != c.status || (c.problem != "" && !strings.Contains(r.Body, `"pointer":"`+c.problem)) {
			t.Errorf("%s %s %s: %d %s", c.method, c.path, c.body, r.Status, r.Body)
		}
	}
	if len(seen) != 4 || seen[0] != "GET /v1/pets?limit=5&tags=dog&tags=cat " || seen[1] != "GET /v1/pets/7 " {
		b, _ := json.MarshalIndent(seen, "", " ")
		t.Errorf("the backend saw %s", b)
	}
	// A second import writes nothing over the drafts.
	errb.Reset()
	if err := putDrafts(context.Background(), g.Client, drafts, false, "petstore", &out, &errb); err != nil || strings.Count(errb.String(), "exists; not overwritten") != 4 {
		t.Errorf("%v\n%s", err, errb.String())
	}
}

// The command: --dry-run prints the drafts and writes nothing (it needs no
// NATS); a document that is not OpenAPI 3, or has no backend to call, is
// refused with what to do.
func TestImportOpenAPICommand(t *testing.T) {
	jw := func(stdin string, args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(append(args, "--nats", "nats://127.0.0.1:1"), strings.NewReader(stdin), &out, &errb)
		return code, out.String(), errb.String()
	}
	code, out, errs := jw(petstore, "api", "import-openapi", "-", "--dry-run", "--pool", "pets")
	if code != 0 || strings.Count(out, `"name":"pets.`) != 4 || !strings.Contains(errs, "skipped") {
		t.Fatalf("dry run: %d\n%s\n%s", code, out, errs)
	}
	for doc, want := range map[string]string{
		`{"swagger":"2.0","paths":{}}`:                        "not an OpenAPI 3 document",
		`{"openapi":"3.1.0","info":{"title":"t"},"paths":{}}`: "give --backend",
		`[1,2]`: "not an OpenAPI document",
	} {
		if code, _, errs := jw(doc, "api", "import-openapi", "-", "--dry-run"); code == 0 || !strings.Contains(errs, want) {
			t.Errorf("%s: %d %s", doc, code, errs)
		}
	}
}

// Regressions of the import review: a constraint the edge cannot check is
// said, never dropped in silence; nullable keeps an enum's say; array
// bounds hold; a parameter described by content is said; two operations
// that would get one API name do not; a reference inside a parameter's
// schema resolves.
func TestImportOpenAPIReview(t *testing.T) {
	const doc = `openapi: 3.0.3
info: {title: zz, version: "1"}
paths:
  /c-d:
    get:
      parameters:
        - {name: limit, in: query, schema: {type: integer, minimum: 1, maximum: 100}}
        - {name: ids, in: query, schema: {type: array, minItems: 2, maxItems: 3, items: {type: string}}}
        - {name: filter, in: query, content: {application/json: {schema: {type: string, maxLength: 3}}}}
        - {name: code, in: query, schema: {allOf: [{$ref: "#/components/schemas/Short"}]}}
  /c/d:
    get: {}
  /k:
    post:
      operationId: kind
      requestBody:
        required: true
        content: {application/json: {schema: {type: object, properties: {kind: {type: string, nullable: true, enum: [x, y]}}}}}
components:
  schemas:
    Short: {type: string, maxLength: 3}
`
	drafts, warnings, err := openAPIDrafts([]byte(doc), openAPIOptions{backend: "http://b.invalid"})
	if err != nil {
		t.Fatal(err)
	}
	w := strings.Join(warnings, "\n")
	for _, want := range []string{
		`parameter "limit": minimum, maximum cannot be checked`,
		`parameter "filter" is described by content`,
		"GET /c/d skipped: its API name zz.get--c-d is GET /c-d's already",
	} {
		if !strings.Contains(w, want) {
			t.Errorf("warnings lack %q:\n%s", want, w)
		}
	}
	if len(drafts) != 2 {
		t.Fatalf("%d drafts\n%s", len(drafts), w)
	}
	g := jetwaytest.Start(t)
	var out, errb bytes.Buffer
	if err := putDrafts(context.Background(), g.Client, drafts, false, "zz", &out, &errb); err != nil {
		t.Fatalf("%v\n%s", err, errb.String())
	}
	waitDrafts(g, drafts)
	key, rec, err := registry.NewAPIKey()
	if err != nil {
		t.Fatal(err)
	}
	g.PutApps(&registry.App{ID: "tester", Status: registry.AppActive, Keys: []registry.AppKey{rec}, APIs: []string{"*"}, Sandbox: true})
	for _, c := range []struct {
		method, path, body string
		valid              bool
	}{
		{"GET", "/c-d?ids=a&ids=b", "", true},
		{"GET", "/c-d?ids=a", "", false},
		{"GET", "/c-d?ids=a&ids=b&ids=c&ids=d", "", false},
		{"GET", "/c-d?code=abc", "", true},
		{"GET", "/c-d?code=abcd", "", false},
		{"POST", "/k", `{"kind":"x"}`, true},
		{"POST", "/k", `{"kind":null}`, false},
	} {
		r := g.Do(c.method, c.path, strings.NewReader(c.body), "X-Api-Key", key, "Content-Type", "application/json")
		if invalid := r.Code == "INVALID_REQUEST"; invalid == c.valid || r.Code == "ROUTE_NOT_FOUND" {
			t.Errorf("%s %s %s: %d %s", c.method, c.path, c.body, r.Status, r.Body)
		}
	}
}

// waitDrafts waits until the gateway serves every draft an import wrote:
// putDrafts returns when the registry has them, not when an edge routes them.
func waitDrafts(g *jetwaytest.Gateway, drafts []draft) {
	g.T.Helper()
	names := make([]string, 0, len(drafts))
	for _, d := range drafts {
		var e struct{ Name string }
		if err := json.Unmarshal(d.doc, &e); err != nil {
			g.T.Fatal(err)
		}
		names = append(names, e.Name)
	}
	g.WaitDrafts(names...)
}
