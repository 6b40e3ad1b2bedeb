package edge

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/jetway-gw/jetway/registry"
)

// Fixed keys, so that the fuzz corpus in testdata/fuzz/FuzzJWTVerify can
// hold tokens that are validly signed.
var (
	testECKey = func() *ecdsa.PrivateKey {
		d := sha256.Sum256([]byte("jetway jwt test ES256 key"))
		k, err := ecdsa.ParseRawPrivateKey(elliptic.P256(), d[:])
		if err != nil {
			panic(err)
		}
		return k
	}()
	testHMACSecret = func() []byte { s := sha256.Sum256([]byte("jetway jwt test HS256 secret")); return s[:] }()
	// testNow is the clock of the tests that set one: the fuzz corpus's
	// tokens are valid at this time, whenever the tests run.
	testNow = time.Unix(1767225600, 0) // 2026-01-01
)

func b64url(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// testJWKS is a JWKS document with the EC key as "ec1" and the HMAC secret
// as "hs1", either left out when its kid is in drop.
func testJWKS(drop ...string) []byte {
	var keys []map[string]string
	for _, k := range []map[string]string{
		{"kty": "EC", "kid": "ec1", "crv": "P-256", "x": b64url(testECKey.X.FillBytes(make([]byte, 32))), "y": b64url(testECKey.Y.FillBytes(make([]byte, 32)))},
		{"kty": "oct", "kid": "hs1", "k": b64url(testHMACSecret)},
	} {
		if !strings.Contains(strings.Join(drop, " "), k["kid"]) {
			keys = append(keys, k)
		}
	}
	b, _ := json.Marshal(map[string]any{"keys": keys})
	return b
}

func testJWTConfig() *registry.JWTAuth {
	return &registry.JWTAuth{Issuer: "https://id.test", Audience: "orders", Algorithms: []string{"ES256", "HS256"},
		Leeway: registry.Duration(5 * time.Second)}
}

// newTestVerifier is a verifier of testJWKS from a file, whose clock is
// *clock (Unix ns).
func newTestVerifier(tb testing.TB, clock *atomic.Int64) *jwtVerifier {
	tb.Helper()
	c := testJWTConfig()
	c.JWKSFile = filepath.Join(tb.TempDir(), "jwks.json")
	if err := os.WriteFile(c.JWKSFile, testJWKS(), 0o600); err != nil {
		tb.Fatal(err)
	}
	file, err := readJWKS(c)
	if err != nil {
		tb.Fatal(err)
	}
	v, err := newJWTVerifier(c, file)
	if err != nil {
		tb.Fatal(err)
	}
	v.now = func() time.Time { return time.Unix(0, clock.Load()) }
	return v
}

func testClaims(mod func(jwt.MapClaims)) jwt.MapClaims {
	c := jwt.MapClaims{"iss": "https://id.test", "aud": "orders", "sub": "shop",
		"exp": testNow.Add(time.Minute).Unix(), "iat": testNow.Unix()}
	if mod != nil {
		mod(c)
	}
	return c
}

func signTest(tb testing.TB, m jwt.SigningMethod, kid string, key any, c jwt.MapClaims) string {
	tb.Helper()
	tok := jwt.NewWithClaims(m, c)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func digest(token string) *[sha256.Size]byte { s := sha256.Sum256([]byte(token)); return &s }

// A cached token is good only within [nbf-leeway, exp): past exp (the
// leeway is not granted from the cache) it gets the full check again,
// which refuses it once past the leeway too.
func TestJWTCacheHonoursExpAndNbf(t *testing.T) {
	var clock atomic.Int64
	clock.Store(testNow.UnixNano())
	v := newTestVerifier(t, &clock)
	at := func(d time.Duration) time.Time { clock.Store(testNow.Add(d).UnixNano()); return testNow.Add(d) }

	tok := signTest(t, jwt.SigningMethodES256, "ec1", testECKey, testClaims(nil)) // exp: testNow+1m
	if app, err := v.verify(tok); err != nil || app != "shop" {
		t.Fatalf("valid token: %q %v", app, err)
	}
	if n := v.cache.len(); n != 1 {
		t.Fatalf("%d entries after one valid token", n)
	}
	if _, ok := v.cache.get(digest(tok), v.keys.Load(), at(59*time.Second)); !ok {
		t.Error("no hit 1 s before exp")
	}
	if _, ok := v.cache.get(digest(tok), v.keys.Load(), at(61*time.Second)); ok {
		t.Error("a hit 1 s past exp: the cache must not grant the leeway")
	}
	at(61 * time.Second)
	if _, err := v.verify(tok); err != nil { // the parser's leeway (5 s) still lets it in
		t.Errorf("within the leeway: %v", err)
	}
	if n := v.cache.len(); n != 0 {
		t.Errorf("a token past its exp was cached (%d entries)", n)
	}
	at(0)
	v.verify(tok) // cached again
	at(66 * time.Second)
	if _, err := v.verify(tok); !errors.Is(err, jwt.ErrTokenExpired) {
		t.Errorf("cached token past exp and leeway: %v, want expired", err)
	}

	// nbf: testNow+10s, leeway 5s.
	early := signTest(t, jwt.SigningMethodES256, "ec1", testECKey, testClaims(func(c jwt.MapClaims) { c["nbf"] = testNow.Add(10 * time.Second).Unix() }))
	at(0)
	if _, err := v.verify(early); !errors.Is(err, jwt.ErrTokenNotValidYet) {
		t.Errorf("before nbf: %v", err)
	}
	at(6 * time.Second)
	if _, err := v.verify(early); err != nil {
		t.Errorf("after nbf-leeway: %v", err)
	}
	at(4 * time.Second) // the clock stepped back
	if _, err := v.verify(early); !errors.Is(err, jwt.ErrTokenNotValidYet) {
		t.Errorf("cached token, clock back before nbf-leeway: %v", err)
	}
}

// An entry lives jwtCacheTTL at most, however far its exp.
func TestJWTCacheTTL(t *testing.T) {
	var clock atomic.Int64
	clock.Store(testNow.UnixNano())
	v := newTestVerifier(t, &clock)
	tok := signTest(t, jwt.SigningMethodHS256, "hs1", testHMACSecret, testClaims(func(c jwt.MapClaims) { c["exp"] = testNow.Add(24 * time.Hour).Unix() }))
	if _, err := v.verify(tok); err != nil {
		t.Fatal(err)
	}
	keys := v.keys.Load()
	if _, ok := v.cache.get(digest(tok), keys, testNow.Add(jwtCacheTTL-time.Second)); !ok {
		t.Error("no hit within the TTL")
	}
	if _, ok := v.cache.get(digest(tok), keys, testNow.Add(jwtCacheTTL)); ok {
		t.Error("a hit at the TTL")
	}
}

// Tokens that differ from a cached one in any way get the full check, and
// its error each time; they are never cached.
func TestJWTCacheRefusesForgeries(t *testing.T) {
	var clock atomic.Int64
	clock.Store(testNow.UnixNano())
	v := newTestVerifier(t, &clock)
	good := signTest(t, jwt.SigningMethodES256, "ec1", testECKey, testClaims(nil))
	if _, err := v.verify(good); err != nil {
		t.Fatal(err)
	}
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.MarshalPKIXPublicKey(&testECKey.PublicKey)
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	head, _, _ := strings.Cut(good, ".")
	sig := good[strings.LastIndex(good, "."):]
	payload, _ := json.Marshal(testClaims(func(c jwt.MapClaims) { c["sub"] = "admin" }))
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, testClaims(nil)).SignedString(jwt.UnsafeAllowNoneSignatureType)
	flip := []byte(good)
	flip[len(flip)-5] ^= 1
	for name, tok := range map[string]string{
		"signature changed":            string(flip),
		"claims changed":               head + "." + b64url(payload) + sig,
		"another key, same kid":        signTest(t, jwt.SigningMethodES256, "ec1", other, testClaims(nil)),
		"alg none":                     none,
		"HS256 with the EC public key": signTest(t, jwt.SigningMethodHS256, "ec1", pubPEM, testClaims(nil)),
		"trailing dot":                 good + ".",
	} {
		_, err1 := v.verify(tok)
		_, err2 := v.verify(tok)
		if err1 == nil || err2 == nil || err1.Error() != err2.Error() {
			t.Errorf("%s: %v, then %v", name, err1, err2)
		}
	}
	if n := v.cache.len(); n != 1 {
		t.Errorf("%d entries: refused tokens were cached", n)
	}
}

func TestJWTCacheBound(t *testing.T) {
	var c jwtCache
	e := jwtEntry{app: "shop", from: 0, until: testNow.Add(time.Hour).UnixNano()}
	var last [sha256.Size]byte
	for i := range 3 * jwtCacheMax {
		last = sha256.Sum256(fmt.Appendf(nil, "token %d", i))
		c.put(&last, e)
	}
	if n := c.len(); n > jwtCacheMax || n < jwtCacheMax*9/10 {
		t.Errorf("%d entries after %d puts, want at most %d (and not far fewer)", n, 3*jwtCacheMax, jwtCacheMax)
	}
	for i := range c.shards {
		if n := len(c.shards[i].m); n > jwtCacheMax/jwtCacheShards {
			t.Errorf("shard %d holds %d", i, n)
		}
	}
	if _, ok := c.get(&last, nil, testNow); !ok {
		t.Error("the last token put is not there")
	}
}

// A JWKS URL whose document drops a key: tokens it signed, cached or not,
// are refused from the refresh on; an unchanged document keeps the cache.
func TestJWTCacheJWKSRefreshDropsKey(t *testing.T) {
	var doc atomic.Pointer[[]byte]
	var fetches atomic.Int64
	full := testJWKS()
	doc.Store(&full)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		w.Write(*doc.Load())
	}))
	defer srv.Close()
	c := testJWTConfig()
	c.JWKSURL = srv.URL
	v, err := newJWTVerifier(c, nil) // a jwks_url: no file
	if err != nil {
		t.Fatal(err)
	}
	v.now = func() time.Time { return testNow }
	// refreshed fetches the document again and waits for the fetch to end.
	refreshed := func() {
		t.Helper()
		n := fetches.Load()
		deadline := time.Now().Add(5 * time.Second)
		for fetches.Load() == n || v.fetching.Load() {
			if time.Now().After(deadline) {
				t.Fatal("no JWKS fetch")
			}
			v.refresh()
			time.Sleep(time.Millisecond)
		}
	}
	for deadline := time.Now().Add(5 * time.Second); v.keys.Load() == nil || v.fetching.Load(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("keys not fetched")
		}
	}
	es := signTest(t, jwt.SigningMethodES256, "ec1", testECKey, testClaims(nil))
	hs := signTest(t, jwt.SigningMethodHS256, "hs1", testHMACSecret, testClaims(nil))
	for _, tok := range []string{es, hs, es, hs} {
		if _, err := v.verify(tok); err != nil {
			t.Fatal(err)
		}
	}

	keys := v.keys.Load()
	refreshed()
	if v.keys.Load() != keys || v.cache.len() != 2 {
		t.Errorf("an unchanged JWKS replaced the key set or emptied the cache (%d entries)", v.cache.len())
	}

	dropped := testJWKS("ec1")
	doc.Store(&dropped)
	refreshed()
	if _, err := v.verify(es); err == nil {
		t.Error("a cached token of a key the JWKS dropped is still accepted")
	}
	if _, err := v.verify(hs); err != nil {
		t.Errorf("a token of a key the JWKS kept: %v", err)
	}
}

// Many goroutines verifying while the key set is replaced (as a refresh
// does), the clock moves and the cache is flooded: run with -race.
func TestJWTCacheConcurrent(t *testing.T) {
	var clock atomic.Int64
	clock.Store(testNow.UnixNano())
	v := newTestVerifier(t, &clock)
	type call struct {
		token, app string
	}
	var calls []call
	for _, app := range []string{"a", "b", "c"} {
		c := testClaims(func(c jwt.MapClaims) { c["sub"] = app })
		calls = append(calls, call{signTest(t, jwt.SigningMethodES256, "ec1", testECKey, c), app},
			call{signTest(t, jwt.SigningMethodHS256, "hs1", testHMACSecret, c), app})
	}
	bad := signTest(t, jwt.SigningMethodHS256, "hs1", []byte("not the secret, not the secret!!"), testClaims(nil))
	calls = append(calls, call{bad, ""}, call{"garbage", ""})

	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() { // refreshes that store an equal key set
		for {
			select {
			case <-stop:
				return
			default:
			}
			keys := *v.keys.Load()
			v.keys.Store(&keys)
			clock.Add(int64(time.Millisecond))
			time.Sleep(100 * time.Microsecond)
		}
	})
	wg.Go(func() { // a flood of other entries, for eviction
		for i := range 2 * jwtCacheMax {
			v.cache.put(digest(fmt.Sprint(i)), jwtEntry{app: "x", until: testNow.Add(time.Hour).UnixNano()})
		}
	})
	var workers sync.WaitGroup
	for g := range 8 {
		workers.Go(func() {
			for i := range 200 {
				c := calls[(g+i)%len(calls)]
				app, err := v.verify(c.token)
				if c.app == "" && err == nil || c.app != "" && (err != nil || app != c.app) {
					t.Errorf("%.20s…: %q %v, want %q", c.token, app, err, c.app)
					return
				}
			}
		})
	}
	workers.Wait()
	close(stop)
	wg.Wait()
	if n := v.cache.len(); n > jwtCacheMax {
		t.Errorf("%d entries", n)
	}
}

// critHeaders are "crit" values a token may carry: extensions Jetway does
// not know, ones it does implement in other ways (exp, b64), and malformed
// ones. Every one is refused (RFC 7515 §4.1.11).
var critHeaders = []any{[]string{"exp"}, []string{"b64"}, []string{"http://example.com/ext", "kid"}, []string{}, "exp", []any{1}, []any{""}, nil, map[string]any{"exp": true}}

// signCrit signs the test claims with a "crit" header (and, for b64, the
// header it names).
func signCrit(tb testing.TB, m jwt.SigningMethod, kid string, key any, crit any) string {
	tb.Helper()
	tok := jwt.NewWithClaims(m, testClaims(nil))
	tok.Header["kid"] = kid
	tok.Header["crit"] = crit
	if c, ok := crit.([]string); ok && len(c) == 1 && c[0] == "b64" {
		tok.Header["b64"] = true
	}
	s, err := tok.SignedString(key)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// A token naming any critical extension is refused with a reason, though
// its signature and claims are good, and is never cached as accepted.
func TestJWTCritRefused(t *testing.T) {
	var clock atomic.Int64
	clock.Store(testNow.UnixNano())
	v := newTestVerifier(t, &clock)
	for _, crit := range critHeaders {
		tok := signCrit(t, jwt.SigningMethodES256, "ec1", testECKey, crit)
		for range 2 { // the second call would be a cache hit
			if app, err := v.verify(tok); err == nil || !strings.Contains(err.Error(), `"crit"`) {
				t.Errorf("crit %v: app %q, err %v; want refused for its crit header", crit, app, err)
			}
		}
	}
	if _, err := v.verify(signTest(t, jwt.SigningMethodES256, "ec1", testECKey, testClaims(nil))); err != nil {
		t.Fatalf("the same token without crit: %v", err)
	}
}

// FuzzJWTVerify feeds whole tokens to a verifier of an ES256 and an HS256
// key. It must never panic, and accept only what we signed: a token it
// takes must carry one of the headers and claims signed by the test keys,
// name the app "shop", and pass the full check without the cache as well.
// The seed corpus (testdata/fuzz/FuzzJWTVerify) has such tokens, and ones
// with alg none, alg confusion (HS256 keyed with the EC public key), a
// key of the wrong kind for the alg, bad claims, truncation, extra dots,
// padding and a 16 KB header.
func FuzzJWTVerify(f *testing.F) {
	var clock atomic.Int64
	clock.Store(testNow.UnixNano())
	v := newTestVerifier(f, &clock)
	signed := map[string]bool{}
	for _, m := range []jwt.SigningMethod{jwt.SigningMethodES256, jwt.SigningMethodHS256} {
		kid, key := "ec1", any(testECKey)
		if m == jwt.SigningMethodHS256 {
			kid, key = "hs1", testHMACSecret
		}
		tok := signTest(f, m, kid, key, testClaims(nil))
		signed[tok[:strings.LastIndex(tok, ".")]] = true
		f.Add(tok)
		// Validly signed, but with a crit header: never accepted, so
		// never in signed.
		for _, crit := range critHeaders {
			f.Add(signCrit(f, m, kid, key, crit))
		}
	}
	f.Add("")
	f.Fuzz(func(t *testing.T, token string) {
		app, err := v.verify(token)
		app2, _, err2 := v.check(token)
		if (err == nil) != (err2 == nil) || app != app2 {
			t.Fatalf("cached %q %v, full check %q %v", app, err, app2, err2)
		}
		if err != nil {
			return
		}
		if i := strings.LastIndex(token, "."); i < 0 || !signed[token[:i]] || app != "shop" {
			t.Fatalf("accepted a token we did not sign (app %q): %q", app, token)
		}
	})
}

// BenchmarkJWTVerify compares a token's full check with a cache hit.
//
//	go test -run '^$' -bench JWTVerify -benchmem ./edge/
func BenchmarkJWTVerify(b *testing.B) {
	var clock atomic.Int64
	clock.Store(testNow.UnixNano())
	v := newTestVerifier(b, &clock)
	for _, tc := range []struct {
		alg   jwt.SigningMethod
		kid   string
		key   any
		cache bool
	}{
		{jwt.SigningMethodES256, "ec1", testECKey, false},
		{jwt.SigningMethodES256, "ec1", testECKey, true},
		{jwt.SigningMethodHS256, "hs1", testHMACSecret, false},
		{jwt.SigningMethodHS256, "hs1", testHMACSecret, true},
	} {
		tok := signTest(b, tc.alg, tc.kid, tc.key, testClaims(nil))
		name := tc.alg.Alg() + "/uncached"
		if tc.cache {
			name = tc.alg.Alg() + "/cached"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if tc.cache {
					_, err = v.verify(tok)
				} else {
					_, _, err = v.check(tok)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
