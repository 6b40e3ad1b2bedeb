package sign

import (
	"net/http/httptest"
	"strings"
	"testing"
)

func TestSignAndParse(t *testing.T) {
	r := httptest.NewRequest("POST", "/v1/orders/a%20b?z=1&a=2&a=1", strings.NewReader("{}"))
	r.Header.Set("Content-Type", "application/json")
	if err := Sign(r, []byte("{}"), "shop", []byte("secret"), "Content-Type"); err != nil {
		t.Fatal(err)
	}
	p, err := Parse(r.Header.Get("Authorization"))
	if err != nil {
		t.Fatal(err)
	}
	s := StringToSign("POST", "/v1/orders/a%20b", "z=1&a=2&a=1", p.TS, p.Nonce, []byte("{}"), p.Headers, r.Header)
	if MAC([]byte("secret"), s) != p.Sig || p.App != "shop" || len(p.Headers) != 1 {
		t.Fatalf("signature does not verify: %+v", p)
	}
	if !strings.Contains(s, "\na=1&a=2&z=1\n") || !strings.HasSuffix(s, "\ncontent-type:application/json") {
		t.Fatalf("string to sign:\n%s", s)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(Scheme + " app=shop,ts=1700000000,nonce=abcdefghijklmnop,headers=content-type,sig=xyz")
	f.Add(Scheme + " app=,ts=,nonce=,sig=")
	f.Add("Bearer x")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := Parse(s)
		if err == nil && (p.App == "" || p.Sig == "" || len(p.Nonce) < 16) {
			t.Fatalf("accepted %q as %+v", s, p)
		}
	})
}
