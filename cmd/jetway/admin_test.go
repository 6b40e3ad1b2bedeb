package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestAdminToken(t *testing.T) {
	for _, tc := range []struct {
		addr, token string
		ok          bool
	}{
		{"127.0.0.1:8081", "", true},
		{"[::1]:8081", "", true},
		{"localhost:8081", "", true},
		{"", "", true},
		{"0.0.0.0:8081", "", false},
		{":8081", "", false},
		{"10.1.2.3:8081", "", false},
		{"0.0.0.0:8081", "s3cret", true},
	} {
		if err := checkAdminAddr(tc.addr, tc.token); (err == nil) != tc.ok {
			t.Errorf("checkAdminAddr(%q, %q) = %v", tc.addr, tc.token, err)
		}
	}
	h := requireToken("s3cret", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("inside")) }))
	for _, tc := range []struct {
		path, auth string
		status     int
	}{
		{"/healthz", "", 200},
		{"/readyz", "", 200},
		{"/metrics", "", 401},
		{"/metrics", "Bearer wrong", 401},
		{"/metrics", "Bearer s3cret", 200},
		{"/nodes", "bearer s3cret", 401},
	} {
		req := httptest.NewRequest("GET", tc.path, nil)
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tc.status {
			t.Errorf("%s with %q: %d, want %d", tc.path, tc.auth, rec.Code, tc.status)
		}
	}
	// A node refuses to start with an open admin listener and no token.
	var out, errb strings.Builder
	if code := run([]string{"worker", "--pool", "p", "--admin", "0.0.0.0:0", "--nats", "nats://127.0.0.1:1"}, strings.NewReader(""), &out, &errb); code != 2 || !strings.Contains(errb.String(), "admin-token") {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
}
