package edge

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/jetway-gw/jetway/registry"
)

// jwtVerifier checks bearer tokens for one API: signature by a key of its
// JWKS (matched by kid), an allowed algorithm (never "none"; HMAC and
// public-key algorithms are never confused: each key only verifies its own
// kind), exp required, nbf, iss and aud checked with a small leeway. The
// tokens it accepted are cached (jwtcache.go).
type jwtVerifier struct {
	parser   *jwt.Parser
	appClaim string
	leeway   time.Duration
	now      func() time.Time // time.Now; tests set another clock
	cache    jwtCache

	// keys: kid → key ("" for a JWKS whose keys have no kid). From a file,
	// loaded once; from a URL, fetched in the background and refreshed.
	keys     atomic.Pointer[map[string]any]
	url      string
	fetched  atomic.Int64 // Unix nanoseconds of the last fetch attempt
	fetching atomic.Bool
	lastJWKS []byte // the document keys came from; only the fetch touches it
	app      string // for an app's own issuer: the app every valid token is
}

// JWKS refresh policy for jwks_url.
const (
	jwksRefresh    = 5 * time.Minute  // refresh known keys this often
	jwksMinRefetch = 30 * time.Second // an unknown kid refetches at most this often
	jwksTimeout    = 5 * time.Second
)

// readJWKS reads the key set of a jwks_file; nil for a jwks_url, whose
// keys the verifier fetches itself.
func readJWKS(c *registry.JWTAuth) ([]byte, error) {
	if c.JWKSURL != "" {
		return nil, nil
	}
	b, err := os.ReadFile(c.JWKSFile)
	if err != nil {
		return nil, fmt.Errorf("reading jwks: %w", err)
	}
	return b, nil
}

// newJWTVerifier builds the checks of settings c; file is the content of
// its jwks_file (readJWKS).
func newJWTVerifier(c *registry.JWTAuth, file []byte) (*jwtVerifier, error) {
	v := &jwtVerifier{leeway: c.LeewayOrDefault(), now: time.Now, url: c.JWKSURL}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods(c.Algorithms),
		jwt.WithExpirationRequired(),
		jwt.WithLeeway(v.leeway),
		jwt.WithStrictDecoding(),
		jwt.WithTimeFunc(func() time.Time { return v.now() }),
	}
	if c.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(c.Issuer))
	}
	if c.Audience != "" {
		opts = append(opts, jwt.WithAudience(c.Audience))
	}
	v.parser, v.appClaim = jwt.NewParser(opts...), c.AppClaim
	if v.appClaim == "" {
		v.appClaim = "sub"
	}
	if c.JWKSURL != "" {
		v.refresh() // in the background: Apply never waits on the network
		return v, nil
	}
	keys, err := parseJWKS(c.JWKSFile, file)
	if err != nil {
		return nil, err
	}
	v.keys.Store(&keys)
	v.lastJWKS = file
	return v, nil
}

// refresh fetches the JWKS URL in the background, one fetch at a time.
// A failed fetch keeps the keys we had. A changed document stores a new key
// set, and so invalidates every cached token (each names the set that
// verified it); an unchanged one keeps the set, and the cache.
func (v *jwtVerifier) refresh() {
	if v.url == "" || !v.fetching.CompareAndSwap(false, true) {
		return
	}
	v.fetched.Store(time.Now().UnixNano())
	go func() {
		defer v.fetching.Store(false)
		client := &http.Client{Timeout: jwksTimeout}
		resp, err := client.Get(v.url)
		if err != nil {
			return
		}
		defer func() { _ = resp.Body.Close() }()
		if resp.StatusCode != http.StatusOK {
			return
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if err != nil {
			return
		}
		if bytes.Equal(b, v.lastJWKS) {
			return
		}
		if keys, err := parseJWKS(v.url, b); err == nil {
			v.keys.Store(&keys)
			v.lastJWKS = b
		}
	}()
}

// key finds a key by kid, refreshing a URL's keys when they are old or
// the kid is unknown.
func (v *jwtVerifier) key(kid string) (any, bool) {
	last := time.Unix(0, v.fetched.Load())
	keys := v.keys.Load()
	if keys == nil {
		if time.Since(last) > time.Second {
			v.refresh()
		}
		return nil, false
	}
	if time.Since(last) > jwksRefresh {
		v.refresh()
	}
	k, ok := (*keys)[kid]
	if !ok && time.Since(last) > jwksMinRefetch {
		v.refresh()
	}
	return k, ok
}

// verify returns the app id a valid token maps to: from the cache for a
// token accepted before with the current keys and still in its validity
// window, else by the full check, whose success is cached.
func (v *jwtVerifier) verify(token string) (string, error) {
	// The key set is read before the check: should a refresh replace it
	// meanwhile, the entry names the older set and is never a hit.
	keys := v.keys.Load()
	var buf [1024]byte // the token's copy for hashing, on the stack unless longer
	sum := sha256.Sum256(append(buf[:0], token...))
	now := v.now()
	if app, ok := v.cache.get(&sum, keys, now); ok {
		if v.url != "" && time.Since(time.Unix(0, v.fetched.Load())) > jwksRefresh {
			v.refresh() // as key does on a miss: hits must not hold old keys in place
		}
		return app, nil
	}
	app, claims, err := v.check(token)
	if err != nil {
		return "", err
	}
	// UnixNano is undefined outside 1678–2262; exp and nbf that far off
	// can only make the entry miss (until is capped by the TTL anyway).
	e := jwtEntry{app: app, keys: keys, from: math.MinInt64, until: now.Add(jwtCacheTTL).UnixNano()}
	if exp, _ := claims.GetExpirationTime(); exp != nil { // required: never nil here
		e.until = min(e.until, exp.UnixNano())
	}
	if nbf, _ := claims.GetNotBefore(); nbf != nil {
		e.from = nbf.Add(-v.leeway).UnixNano()
	}
	if e.until > now.UnixNano() { // not when only the leeway let it in
		v.cache.put(&sum, e)
	}
	return app, nil
}

// check is the full verification of a token, with no cache.
func (v *jwtVerifier) check(token string) (string, jwt.MapClaims, error) {
	claims := jwt.MapClaims{}
	_, err := v.parser.ParseWithClaims(token, claims, func(t *jwt.Token) (any, error) {
		if crit, ok := t.Header["crit"]; ok {
			return nil, critError(crit)
		}
		kid, _ := t.Header["kid"].(string)
		key, ok := v.key(kid)
		if !ok {
			return nil, fmt.Errorf("no key %q", kid)
		}
		// The key's own kind must fit the algorithm's family.
		switch key.(type) {
		case []byte:
			if _, ok := t.Method.(*jwt.SigningMethodHMAC); !ok {
				return nil, errors.New("an HMAC key cannot verify " + t.Method.Alg())
			}
		case *rsa.PublicKey:
			switch t.Method.(type) {
			case *jwt.SigningMethodRSA, *jwt.SigningMethodRSAPSS:
			default:
				return nil, errors.New("an RSA key cannot verify " + t.Method.Alg())
			}
		case *ecdsa.PublicKey:
			if _, ok := t.Method.(*jwt.SigningMethodECDSA); !ok {
				return nil, errors.New("an EC key cannot verify " + t.Method.Alg())
			}
		case ed25519.PublicKey:
			if _, ok := t.Method.(*jwt.SigningMethodEd25519); !ok {
				return nil, errors.New("an Ed25519 key cannot verify " + t.Method.Alg())
			}
		}
		return key, nil
	})
	if err != nil {
		return "", nil, err
	}
	if v.app != "" {
		return v.app, claims, nil // an app's own issuer: its tokens are its own
	}
	app, _ := claims[v.appClaim].(string)
	if app == "" {
		return "", nil, fmt.Errorf("no %q claim naming the app", v.appClaim)
	}
	return app, claims, nil
}

// critError is why a token with a "crit" header is refused. RFC 7515
// §4.1.11: a recipient must reject a JWS whose crit lists an extension it
// does not understand, and crit must be a non-empty array of names. Jetway
// understands no extension, so every crit is refused, before any key is
// looked up; the message says whether it was malformed or just unknown.
func critError(crit any) error {
	names, ok := crit.([]any)
	if !ok || len(names) == 0 {
		return errors.New(`malformed "crit" header (RFC 7515 §4.1.11: a non-empty array of extension names)`)
	}
	for _, n := range names {
		if s, ok := n.(string); !ok || s == "" {
			return errors.New(`malformed "crit" header (RFC 7515 §4.1.11: a non-empty array of extension names)`)
		}
	}
	return fmt.Errorf(`the "crit" header names %d extension(s) that must be understood, and this gateway understands none (RFC 7515 §4.1.11)`, len(names))
}

// jwk is one key of a JWKS (RFC 7517), of the kinds Jetway verifies with.
type jwk struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Use string `json:"use"`
	Crv string `json:"crv"`
	N   string `json:"n"`
	E   string `json:"e"`
	X   string `json:"x"`
	Y   string `json:"y"`
	K   string `json:"k"`
}

// parseJWKS reads a JWKS document; every key of it must be valid.
func parseJWKS(path string, b []byte) (map[string]any, error) {
	var set struct {
		Keys []jwk `json:"keys"`
	}
	if err := json.Unmarshal(b, &set); err != nil {
		return nil, fmt.Errorf("parsing jwks %s: %w", path, err)
	}
	keys := map[string]any{}
	for i, k := range set.Keys {
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		key, err := k.key()
		if err != nil {
			return nil, fmt.Errorf("jwks %s key %d (%q): %w", path, i, k.Kid, err)
		}
		keys[k.Kid] = key
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("jwks %s has no signing keys", path)
	}
	return keys, nil
}

func b64(s string) ([]byte, error) {
	return base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
}

func (k jwk) key() (any, error) {
	switch k.Kty {
	case "RSA":
		n, err1 := b64(k.N)
		e, err2 := b64(k.E)
		if err := errors.Join(err1, err2); err != nil || len(n) < 256 {
			return nil, errors.New("bad or short RSA key (2048 bits at least)")
		}
		return &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}, nil
	case "EC":
		curves := map[string]elliptic.Curve{"P-256": elliptic.P256(), "P-384": elliptic.P384(), "P-521": elliptic.P521()}
		c, ok := curves[k.Crv]
		x, err1 := b64(k.X)
		y, err2 := b64(k.Y)
		if !ok || errors.Join(err1, err2) != nil {
			return nil, errors.New("bad EC key")
		}
		// The uncompressed point 0x04 || X || Y, each padded to the
		// curve's size; parsing it checks the point is on the curve.
		size := (c.Params().BitSize + 7) / 8
		if len(x) > size || len(y) > size {
			return nil, errors.New("bad EC key")
		}
		pt := make([]byte, 1+2*size)
		pt[0] = 4
		copy(pt[1+size-len(x):1+size], x)
		copy(pt[1+2*size-len(y):], y)
		pub, err := ecdsa.ParseUncompressedPublicKey(c, pt)
		if err != nil {
			return nil, errors.New("EC point not on the curve")
		}
		return pub, nil
	case "OKP":
		x, err := b64(k.X)
		if k.Crv != "Ed25519" || err != nil || len(x) != ed25519.PublicKeySize {
			return nil, errors.New("bad Ed25519 key")
		}
		return ed25519.PublicKey(x), nil
	case "oct":
		secret, err := b64(k.K)
		if err != nil || len(secret) < 32 {
			return nil, errors.New("bad or short HMAC secret (32 bytes at least)")
		}
		return secret, nil
	}
	return nil, fmt.Errorf("key type %q not supported", k.Kty)
}
