package edge_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/registry"
)

func TestAPIKeyAuth(t *testing.T) {
	var seen atomic.Value
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Store(fmt.Sprintf("app=%s key=%s auth=%s", r.Header.Get("X-Jetway-App"), r.Header.Get("X-Api-Key"), r.Header.Get("Authorization")))
		io.WriteString(w, "ok")
	}))
	defer backend.Close()
	g := newGateway(t)
	ctx := context.Background()
	key1, rec1, _ := registry.NewAPIKey()
	key2, rec2, _ := registry.NewAPIKey()
	key3, rec3, _ := registry.NewAPIKey()
	for _, a := range []*registry.App{
		{ID: "shop", Status: registry.AppActive, Keys: []registry.AppKey{rec1}, APIs: []string{"orders.*"}},
		{ID: "other", Status: registry.AppActive, Keys: []registry.AppKey{rec2}, APIs: []string{"users.*"}},
		{ID: "gone", Status: registry.AppDisabled, Keys: []registry.AppKey{rec3}, APIs: []string{"*"}},
	} {
		if _, err := g.Client.PutApp(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	natstest.CheckFor(t, 2*time.Second, 2*time.Millisecond, func() error {
		if len(g.EdgeWatcher.Current().Apps) != 3 {
			return fmt.Errorf("apps not loaded")
		}
		return nil
	})
	g.Publish(`{"name":"orders.get","pool":"p","route":{"path":"/orders"},"backend":{"type":"http","url":"` + backend.URL + `"},
		"auth":{"methods":["key"]},"rate_limits":[{"key":["app"],"limit":4,"window":"1m"}]}`)

	for _, tc := range []struct {
		name   string
		hdr    []string
		status int
		code   string
	}{
		{"no key", nil, 401, "UNAUTHENTICATED"},
		{"unknown key", []string{"X-Api-Key", "jw_nope"}, 401, "UNAUTHENTICATED"},
		{"disabled app", []string{"X-Api-Key", key3}, 401, "UNAUTHENTICATED"},
		{"not granted", []string{"X-Api-Key", key2}, 403, "FORBIDDEN"},
		{"granted", []string{"X-Api-Key", key1, "X-Jetway-App", "forged"}, 200, ""},
		{"granted, Authorization", []string{"Authorization", "ApiKey " + key1}, 200, ""},
		{"granted, scheme in lower case", []string{"Authorization", "apikey " + key1}, 200, ""},
		{"granted, spaces after the scheme", []string{"Authorization", "APIKEY   " + key1}, 200, ""},
		{"app limit", []string{"X-Api-Key", key1}, 429, "RATE_LIMITED"},
	} {
		r := g.Do("GET", "/orders", nil, tc.hdr...)
		if r.Status != tc.status || r.Code != tc.code {
			t.Errorf("%s: %d %s, want %d %s", tc.name, r.Status, r.Body, tc.status, tc.code)
		}
		if tc.status == 200 && seen.Load() != "app=shop key= auth=" {
			t.Errorf("%s: backend saw %v (want the app, no credentials)", tc.name, seen.Load())
		}
	}
}

// An app's own limit holds across all the APIs it calls.
func TestAppOwnRateLimit(t *testing.T) {
	g := newGateway(t)
	key, rec, _ := registry.NewAPIKey()
	if _, err := g.Client.PutApp(context.Background(), &registry.App{ID: "lim", Status: registry.AppActive, Keys: []registry.AppKey{rec},
		APIs: []string{"*"}, RateLimit: &registry.AppLimit{Limit: 3, Window: registry.Duration(time.Minute)}}); err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 2*time.Second, 2*time.Millisecond, func() error {
		if g.EdgeWatcher.Current().Apps["lim"] == nil {
			return fmt.Errorf("app not loaded")
		}
		return nil
	})
	g.Publish(`{"name":"l.one","pool":"p","route":{"path":"/l1"},"backend":{"type":"mock"},"auth":{"methods":["key"]}}`)
	g.Publish(`{"name":"l.two","pool":"p","route":{"path":"/l2"},"backend":{"type":"mock"},"auth":{"methods":["key"]}}`)
	statuses := []int{}
	for _, p := range []string{"/l1", "/l2", "/l1", "/l2", "/l1"} {
		statuses = append(statuses, g.Do("GET", p, nil, "X-Api-Key", key).Status)
	}
	if fmt.Sprint(statuses) != "[200 200 200 429 429]" {
		t.Fatalf("statuses %v, want 3 calls across both APIs then 429", statuses)
	}
}

// An app's limit keeps its count across registry changes that leave the
// limit as it is (another API published, the app granted one more API),
// and starts afresh when the limit itself changes.
func TestAppRateLimitKeptWhileUnchanged(t *testing.T) {
	g := newGateway(t)
	key, rec, _ := registry.NewAPIKey()
	app := &registry.App{ID: "keep", Status: registry.AppActive, Keys: []registry.AppKey{rec},
		APIs: []string{"k.*"}, RateLimit: &registry.AppLimit{Limit: 3, Window: registry.Duration(time.Minute)}}
	g.PutApps(app)
	g.Publish(`{"name":"k.one","pool":"p","route":{"path":"/k1"},"backend":{"type":"mock"},"auth":{"methods":["key"]}}`)
	calls := func(n int) (out []int) {
		for range n {
			out = append(out, g.Do("GET", "/k1", nil, "X-Api-Key", key).Status)
		}
		return out
	}
	if got := fmt.Sprint(calls(2)); got != "[200 200]" {
		t.Fatalf("first calls %s", got)
	}
	g.Publish(`{"name":"k.two","pool":"p","route":{"path":"/k2"},"backend":{"type":"mock"},"auth":{"methods":["key"]}}`)
	app.APIs = []string{"k.*", "other.*"}
	g.PutApps(app)
	if got := fmt.Sprint(calls(2)); got != "[200 429]" {
		t.Fatalf("after unrelated changes %s, want the count kept (one call left of 3)", got)
	}
	app.RateLimit = &registry.AppLimit{Limit: 4, Window: registry.Duration(time.Minute)}
	g.PutApps(app)
	if got := fmt.Sprint(calls(5)); got != "[200 200 200 200 429]" {
		t.Fatalf("after the limit changed %s, want a fresh count of 4", got)
	}
}
