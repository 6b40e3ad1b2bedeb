package sign

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
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

// The scheme name is case-insensitive and may be followed by several
// spaces (RFC 7235 §2.1), but it must be followed by one.
func TestParseScheme(t *testing.T) {
	const params = "app=shop,ts=1700000000,nonce=abcdefghijklmnop,sig=xyz"
	for _, tc := range []struct {
		auth string
		ok   bool
	}{
		{Scheme + " " + params, true},
		{strings.ToLower(Scheme) + " " + params, true},
		{"Jw1-Hmac-Sha256   " + params, true},
		{Scheme + params, false},
		{Scheme + "\t" + params, false},
		{Scheme, false},
		{"JW1-HMAC-SHA25 " + params, false},
		{"Bearer " + params, false},
	} {
		p, err := Parse(tc.auth)
		if (err == nil) != tc.ok || tc.ok && (p.App != "shop" || p.Sig != "xyz") {
			t.Errorf("Parse(%q) = %+v, %v; want ok %v", tc.auth, p, err, tc.ok)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(Scheme + " app=shop,ts=1700000000,nonce=abcdefghijklmnop,headers=content-type,sig=xyz")
	f.Add("jw1-hmac-sha256   app=shop,ts=1700000000,nonce=abcdefghijklmnop,sig=xyz")
	f.Add(Scheme + " app=,ts=,nonce=,sig=")
	f.Add("Bearer x")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := Parse(s)
		if err == nil && (p.App == "" || p.Sig == "" || len(p.Nonce) < 16) {
			t.Fatalf("accepted %q as %+v", s, p)
		}
	})
}

func TestCallbackSignature(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	body := []byte(`{"id":"job1","state":"succeeded"}`)
	r, _ := http.NewRequest("POST", "https://hooks.example.com/done?ref=7", nil)
	r.Header.Set(CallbackJobHeader, "job1")
	r.Header.Set(CallbackStateHeader, "succeeded")
	if err := SignCallback(r, body, "acme", CallbackKey(secret, "job1")); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if job, err := VerifyCallback(r, body, "acme", [][]byte{[]byte("old secret"), secret}, time.Minute, now); err != nil || job != "job1" {
		t.Fatalf("verify: %q %v", job, err)
	}
	for name, tamper := range map[string]func(*http.Request) ([]byte, string, time.Time){
		"another body": func(r *http.Request) ([]byte, string, time.Time) { return []byte("{}"), "acme", now },
		"another app":  func(r *http.Request) ([]byte, string, time.Time) { return body, "other", now },
		"another state": func(r *http.Request) ([]byte, string, time.Time) {
			r.Header.Set(CallbackStateHeader, "failed")
			return body, "acme", now
		},
		"another job": func(r *http.Request) ([]byte, string, time.Time) {
			r.Header.Set(CallbackJobHeader, "job2")
			return body, "acme", now
		},
		"too late": func(r *http.Request) ([]byte, string, time.Time) { return body, "acme", now.Add(time.Hour) },
		"no signature": func(r *http.Request) ([]byte, string, time.Time) {
			r.Header.Del(CallbackHeader)
			return body, "acme", now
		},
	} {
		rr := r.Clone(r.Context())
		b, app, at := tamper(rr)
		if _, err := VerifyCallback(rr, b, app, [][]byte{secret}, time.Minute, at); err == nil {
			t.Errorf("%s: verified", name)
		}
	}
}
