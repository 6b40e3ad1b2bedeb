package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// testAdminToken passes checkAdminToken (openssl rand -hex 16).
const testAdminToken = "3f9c2a7e1b6d4085c9e2f17a5b3d8e60"

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
		{"0.0.0.0:8081", testAdminToken, true},
	} {
		if err := checkAdminAddr(tc.addr, tc.token); (err == nil) != tc.ok {
			t.Errorf("checkAdminAddr(%q, %q) = %v", tc.addr, tc.token, err)
		}
	}
	h := requireToken(testAdminToken, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("inside")) }))
	for _, tc := range []struct {
		path, auth string
		status     int
	}{
		{"/healthz", "", 200},
		{"/readyz", "", 200},
		{"/metrics", "", 401},
		{"/metrics", "Bearer wrong", 401},
		{"/metrics", "Bearer " + testAdminToken, 200},
		{"/metrics", "Bearer " + testAdminToken[:len(testAdminToken)-1], 401},
		{"/metrics", "Bearer " + testAdminToken + "x", 401},
		{"/metrics", testAdminToken, 401},
		{"/metrics", "Basic " + testAdminToken, 401},
		// The scheme is case-insensitive, with 1*SP after it (RFC 7235).
		{"/nodes", "bearer " + testAdminToken, 200},
		{"/nodes", "BEARER   " + testAdminToken, 200},
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

// A weak admin token is refused at start, with the rule; the same rule
// holds whatever the listener's address.
func TestAdminTokenStrength(t *testing.T) {
	for _, tc := range []struct {
		token string
		ok    bool
	}{
		{"", true}, // no token: checkAdminAddr decides
		{testAdminToken, true},
		{"0123456789abcdefghijklmnopqrstuv", true},
		{"x", false},
		{"s3cret", false},
		{testAdminToken[:31], false},
		{strings.Repeat("a", 64), false},
		{strings.Repeat("ab", 32), false},
		{strings.Repeat("1234567", 5), false}, // 35 characters, 7 different
		{testAdminToken[:20] + " " + testAdminToken[20:], false},
		{testAdminToken + "\n", false},
		{testAdminToken + "é", false},
	} {
		if err := checkAdminToken(tc.token); (err == nil) != tc.ok {
			t.Errorf("checkAdminToken(%q) = %v, want ok %v", tc.token, err, tc.ok)
		}
	}
	// --log-level loud is refused after the token check: should the check
	// let the token through, the node still stops at once (with another
	// message) instead of waiting for NATS.
	for _, args := range [][]string{
		{"worker", "--pool", "p", "--admin-token", "x", "--nats", "nats://127.0.0.1:1", "--log-level", "loud"},
		{"edge", "--admin", "0.0.0.0:0", "--admin-token", "s3cret", "--nats", "nats://127.0.0.1:1", "--log-level", "loud"},
	} {
		var out, errb strings.Builder
		if code := run(args, strings.NewReader(""), &out, &errb); code != 2 || !strings.Contains(errb.String(), "at least 32 characters") {
			t.Errorf("jetway %q: exit %d: %s", args, code, errb.String())
		}
	}
	t.Setenv("JETWAY_ADMIN_TOKEN", "x")
	var out, errb strings.Builder
	if code := run([]string{"worker", "--pool", "p", "--nats", "nats://127.0.0.1:1", "--log-level", "loud"}, strings.NewReader(""), &out, &errb); code != 2 || !strings.Contains(errb.String(), "JETWAY_ADMIN_TOKEN") {
		t.Errorf("JETWAY_ADMIN_TOKEN=x: exit %d: %s", code, errb.String())
	}
}
