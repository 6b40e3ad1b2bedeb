package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/sign"
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
	// The app's own limit: 1 call a minute, then 429.
	if res := jetway(t, "", "app", "limit", "shop", "1", "1m", "--nats", url); res.code != 0 || !strings.Contains(res.stdout, "at most 1 calls per 1m") {
		t.Fatalf("app limit: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	waitStatusFunc(m[1], http.StatusTooManyRequests)
	jetway(t, "", "app", "limit", "shop", "0", "--nats", url)
	waitOK(m[1])
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

// waitGet calls GET url with hdr until check accepts the response.
func waitGet(t *testing.T, url string, hdr http.Header, check func(response) error) {
	t.Helper()
	waitForFunc(t, func() error {
		r, err := do(http.MethodGet, url, nil, hdr)
		if err != nil {
			return err
		}
		return check(r)
	})
}

func errStatus(r response) error { return fmt.Errorf("got %d %s", r.status, r.body) }

var secretRE = regexp.MustCompile(`signing secret \(shown once, store it now\): (\S+)`)

// A request signed with the client helper passes through jetway serve
// once; its replay does not.
func TestSignedRequestThroughServe(t *testing.T) {
	t.Parallel()
	srv := startNode(t, "serve", "serve", "")
	srv.waitReady(t)
	putAPI(t, srv.natsURL, `{"name":"signed.api","pool":"sg","route":{"method":"POST","path":"/v1/signed"},"backend":{"type":"mock","body":"ok"},"auth":{"methods":["hmac","key"]}}`)
	res := jetway(t, "", "app", "create", "signer", "--api", "signed.*", "--hmac", "--nats", srv.natsURL)
	m := secretRE.FindStringSubmatch(res.stdout)
	if res.code != 0 || m == nil {
		t.Fatalf("app create --hmac: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	secret, err := base64.RawURLEncoding.DecodeString(m[1])
	if err != nil {
		t.Fatal(err)
	}
	req := func() *http.Request {
		r, _ := http.NewRequest("POST", srv.edge+"/v1/signed", strings.NewReader("payload"))
		if err := sign.Sign(r, []byte("payload"), "signer", secret); err != nil {
			t.Fatal(err)
		}
		return r
	}
	var auth string
	waitForFunc(t, func() error {
		r := req()
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("signed request: %d", resp.StatusCode)
		}
		auth = r.Header.Get("Authorization")
		return nil
	})
	replay, _ := http.NewRequest("POST", srv.edge+"/v1/signed", strings.NewReader("payload"))
	replay.Header.Set("Authorization", auth)
	resp, err := http.DefaultClient.Do(replay)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("replayed signed request: %d", resp.StatusCode)
	}
}

// A sandbox app made with the CLI reaches the API's sandbox tier (served
// by jetway serve's own workers), and flipping the mark sends it to
// production at once.
func TestSandboxAppThroughServe(t *testing.T) {
	t.Parallel()
	srv := startNode(t, "serve", "serve", "")
	srv.waitReady(t)
	url := srv.natsURL
	putAPI(t, url, `{"name":"tiered.get","pool":"tiered","route":{"path":"/v1/tiered"},"backend":{"type":"mock","body":"production"},
		"auth":{"methods":["key"]},"sandbox":{"backend":{"type":"mock","body":"sandbox"}}}`)
	res := jetway(t, "", "app", "create", "tester", "--sandbox", "--api", "tiered.*", "--nats", url)
	m := keyRE.FindStringSubmatch(res.stdout)
	if res.code != 0 || m == nil {
		t.Fatalf("app create --sandbox: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	waitBody := func(want string) {
		t.Helper()
		waitGet(t, srv.edge+"/v1/tiered", http.Header{"X-Api-Key": {m[1]}}, func(r response) error {
			if r.status != 200 || string(r.body) != want || (r.header.Get("X-Jetway-Sandbox") == "true") != (want == "sandbox") {
				return fmt.Errorf("got %d %s (X-Jetway-Sandbox %q), want %s", r.status, r.body, r.header.Get("X-Jetway-Sandbox"), want)
			}
			return nil
		})
	}
	waitBody("sandbox")
	if res := jetway(t, "", "app", "list", "--nats", url); !strings.Contains(res.stdout, "sandbox") {
		t.Errorf("app list does not show the tier:\n%s", res.stdout)
	}
	if res := jetway(t, "", "app", "sandbox", "tester", "off", "--nats", url); res.code != 0 || !strings.Contains(res.stdout, "calls production") {
		t.Fatalf("app sandbox off: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	waitBody("production")
	if res := jetway(t, "", "app", "sandbox", "tester", "maybe", "--nats", url); res.code != 2 {
		t.Errorf("app sandbox maybe: exit %d, want 2 (usage)", res.code)
	}
}

// An app's own token issuer set with the CLI: its tokens work through
// jetway serve on an API with no issuer of its own, until it is dropped.
func TestAppOwnIssuerThroughServe(t *testing.T) {
	t.Parallel()
	srv := startNode(t, "serve", "serve", "")
	srv.waitReady(t)
	url := srv.natsURL
	putAPI(t, url, `{"name":"tok.get","pool":"tok","route":{"path":"/v1/tok"},"backend":{"type":"mock","body":"in"},"auth":{"methods":["jwt"]}}`)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	jwks, _ := json.Marshal(map[string]any{"keys": []map[string]string{{"kty": "EC", "kid": "k1", "crv": "P-256",
		"x": base64.RawURLEncoding.EncodeToString(key.X.FillBytes(make([]byte, 32))),
		"y": base64.RawURLEncoding.EncodeToString(key.Y.FillBytes(make([]byte, 32)))}}})
	file := filepath.Join(t.TempDir(), "partner-jwks.json")
	if err := os.WriteFile(file, jwks, 0o600); err != nil {
		t.Fatal(err)
	}
	if res := jetway(t, "", "app", "create", "partner", "--api", "tok.*", "--nats", url); res.code != 0 {
		t.Fatalf("app create: %s", res.stderr)
	}
	if res := jetway(t, "", "app", "jwt", "partner", "--issuer", "https://idp.partner.example", "--jwks", file, "--alg", "ES256", "--nats", url); res.code != 0 ||
		!strings.Contains(res.stdout, "tokens issued by https://idp.partner.example are app partner's") {
		t.Fatalf("app jwt: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"iss": "https://idp.partner.example", "exp": time.Now().Add(time.Hour).Unix()})
	tok.Header["kid"] = "k1"
	signed, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	waitStatus := func(want int) {
		t.Helper()
		waitGet(t, srv.edge+"/v1/tok", http.Header{"Authorization": {"Bearer " + signed}}, func(r response) error {
			if r.status != want {
				return errStatus(r)
			}
			return nil
		})
	}
	waitStatus(http.StatusOK)
	if res := jetway(t, "", "app", "get", "partner", "--nats", url); !strings.Contains(res.stdout, "https://idp.partner.example") {
		t.Errorf("app get does not show the issuer:\n%s", res.stdout)
	}
	if res := jetway(t, "", "app", "jwt", "partner", "--issuer", "x", "--nats", url); res.code != 2 {
		t.Errorf("app jwt without --jwks and --alg: exit %d, want 2", res.code)
	}
	jetway(t, "", "app", "jwt", "partner", "off", "--nats", url)
	waitStatus(http.StatusUnauthorized)
}
