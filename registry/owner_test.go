package registry

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// An API entry's owner: optional (entries without one load as before),
// kept through a round trip, and a short printable name or refused with
// the field named.
func TestAPIOwner(t *testing.T) {
	const base = `{"name":"a","pool":"p","route":{"path":"/a"},"backend":{"type":"mock"}`
	a, err := ParseAPI("a", []byte(base+`}`))
	if err != nil || a.Owner != "" {
		t.Fatalf("no owner: %v %+v", err, a)
	}
	for _, owner := range []string{"payments", "Team Payments (EU)", "équipe-paiements", "a@b.example", strings.Repeat("x", MaxOwnerLen)} {
		a, err := ParseAPI("a", []byte(base+`,"owner":`+quote(owner)+`}`))
		if err != nil || a.Owner != owner {
			t.Errorf("owner %q: %v", owner, err)
			continue
		}
		if b, err := ParseAPI("a", a.Marshal()); err != nil || b.Owner != owner {
			t.Errorf("owner %q round trip: %v", owner, err)
		}
	}
	for _, owner := range []string{"", " lead", "trail ", "line\nbreak", "tab\there", "bell\a", "unowned", "Unowned", strings.Repeat("x", MaxOwnerLen+1)} {
		_, err := ParseAPI("a", []byte(base+`,"owner":`+quote(owner)+`}`))
		var ve *ValidationError
		if !errors.As(err, &ve) || !strings.Contains(err.Error(), "owner") {
			t.Errorf("owner %q: want a ValidationError naming owner, got %v", owner, err)
		}
	}
	if _, err := ParseAPI("a", []byte(base+`,"owner":7}`)); err == nil || !strings.Contains(err.Error(), "owner") {
		t.Errorf("a number as owner: %v", err)
	}
	if sb := mustParse(t, base+`,"owner":"payments","auth":{"methods":["key"]},"sandbox":{"pool":"sb","backend":{"type":"mock"}}}`).SandboxAPI(); sb == nil || sb.Owner != "payments" {
		t.Errorf("the sandbox tier's owner: %+v", sb)
	}
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func mustParse(t *testing.T, doc string) *API {
	t.Helper()
	a, err := ParseAPI("", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return a
}
