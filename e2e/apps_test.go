package e2e

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/jetway-gw/jetway/bus/natstest"
)

var keyRE = regexp.MustCompile(`API key \(shown once, store it now\): (jw_\S+)`)

// jetway app manages who may call an API with a key, live.
func TestAppsAndKeys(t *testing.T) {
	t.Parallel()
	srv := startNode(t, "serve", "serve", "")
	srv.waitReady(t)
	url := srv.natsURL
	putAPI(t, url, `{"name":"secure.get","pool":"sec","route":{"path":"/v1/secure"},"backend":{"type":"mock","body":"secret"},"auth":{"methods":["key"]}}`)
	waitStatus(t, srv.edge+"/v1/secure", http.StatusUnauthorized)

	res := jetway(t, "", "app", "create", "shop", "--name", "Shop", "--api", "secure.*", "--nats", url)
	m := keyRE.FindStringSubmatch(res.stdout)
	if res.code != 0 || m == nil {
		t.Fatalf("app create: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	key := m[1]
	call := func(k string) response {
		r, err := do(http.MethodGet, srv.edge+"/v1/secure", nil, http.Header{"X-Api-Key": {k}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	waitOK := func(k string) {
		t.Helper()
		waitForFunc(t, func() error {
			if r := call(k); r.status != 200 || string(r.body) != "secret" {
				return errStatus(r)
			}
			return nil
		})
	}
	waitStatusFunc := func(k string, status int) {
		t.Helper()
		waitForFunc(t, func() error {
			if r := call(k); r.status != status {
				return errStatus(r)
			}
			return nil
		})
	}
	waitOK(key)
	if res := jetway(t, "", "app", "get", "shop", "--nats", url); res.code != 0 || strings.Contains(res.stdout, key) || !strings.Contains(res.stdout, "secure.*") {
		t.Fatalf("app get shows the key or misses the grant:\n%s", res.stdout)
	}
	if res := jetway(t, "", "app", "revoke", "shop", "secure.*", "--nats", url); res.code != 0 {
		t.Fatalf("revoke: %s", res.stderr)
	}
	waitStatusFunc(key, http.StatusForbidden)
	jetway(t, "", "app", "grant", "shop", "secure.get", "--nats", url)
	waitOK(key)
	res = jetway(t, "", "app", "rotate-key", "shop", "--nats", url)
	m = keyRE.FindStringSubmatch(res.stdout)
	if res.code != 0 || m == nil {
		t.Fatalf("rotate-key: %s%s", res.stdout, res.stderr)
	}
	waitOK(m[1])
	if r := call(key); r.status != http.StatusUnauthorized {
		t.Errorf("the old key still works after rotate-key: %d", r.status)
	}
	jetway(t, "", "app", "disable", "shop", "--nats", url)
	waitStatusFunc(m[1], http.StatusUnauthorized)
	if res := jetway(t, "", "app", "list", "--nats", url); !strings.Contains(res.stdout, "disabled") {
		t.Errorf("app list:\n%s", res.stdout)
	}
}

func waitForFunc(t *testing.T, f func() error) {
	t.Helper()
	natstest.CheckFor(t, applyTimeout, pollEvery, f)
}

func errStatus(r response) error { return fmt.Errorf("got %d %s", r.status, r.body) }
