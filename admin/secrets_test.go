package admin_test

import (
	"strings"
	"testing"
)

// Secrets over REST: admins only, even to list; a bad value is a 400 and
// writes nothing; no answer, nor the audit trail, holds a value.
func TestSecretsOverREST(t *testing.T) {
	e := start(t)
	viewer, op := e.token("viewer"), e.token("operator")
	value := `{"url":"nats://partner:4222","user":"jetway","password":"hunter2-secret"}`
	for _, tok := range []string{viewer, op} {
		if r := e.do(tok, "PUT", "/v1/secrets/orders/partner", value); r.status != 403 {
			t.Errorf("a non-admin writes a secret: %d %s", r.status, r.body)
		}
		if r := e.do(tok, "GET", "/v1/secrets", ""); r.status != 403 {
			t.Errorf("a non-admin lists the secrets: %d %s", r.status, r.body)
		}
	}
	if r := e.do(boot, "PUT", "/v1/secrets/orders/partner", `{"url":"http://x"}`); r.status != 400 || r.err.Code != "INVALID_ENTRY" {
		t.Errorf("a bad secret: %d %s", r.status, r.body)
	}
	if r := e.do(boot, "PUT", "/v1/secrets/orders/Bad.Name", value); r.status != 400 || r.err.Code != "INVALID_ENTRY" {
		t.Errorf("a bad name: %d %s", r.status, r.body)
	}
	if r := e.do(boot, "GET", "/v1/secrets", ""); r.status != 200 || strings.Contains(r.body, "partner") {
		t.Fatalf("a bad write left something: %d %s", r.status, r.body)
	}
	put := e.do(boot, "PUT", "/v1/secrets/orders/partner", value)
	if put.status != 200 || put.header.Get("ETag") == "" || strings.Contains(put.body, "hunter2") || !strings.Contains(put.body, `"name":"partner"`) {
		t.Fatalf("put: %d %s", put.status, put.body)
	}
	for _, path := range []string{"/v1/secrets", "/v1/secrets?pool=orders", "/v1/audit?kind=secret"} {
		r := e.do(boot, "GET", path, "")
		if r.status != 200 || !strings.Contains(r.body, "partner") || strings.Contains(r.body, "hunter2") {
			t.Errorf("%s: %d %s", path, r.status, r.body)
		}
	}
	if r := e.do(boot, "GET", "/v1/secrets?pool=eu", ""); r.status != 200 || strings.Contains(r.body, "partner") {
		t.Errorf("another pool's list: %d %s", r.status, r.body)
	}
	if r := e.do(boot, "DELETE", "/v1/secrets/orders/partner", ""); r.status != 204 {
		t.Errorf("delete: %d %s", r.status, r.body)
	}
	if r := e.do(boot, "DELETE", "/v1/secrets/orders/partner", ""); r.status != 404 {
		t.Errorf("delete again: %d %s", r.status, r.body)
	}
}
