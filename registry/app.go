package registry

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/schemas"
)

// BucketApps holds the apps that may call APIs: key = app id.
const BucketApps = bus.BucketApps

// App statuses.
const (
	AppActive   = "active"
	AppDisabled = "disabled"
)

// App is a caller of APIs: its credentials (API keys, stored only as
// SHA-256 digests) and the APIs it was granted.
type App struct {
	ID     string `json:"id"`
	Name   string `json:"name,omitempty"`
	Status string `json:"status"`
	// Keys are the digests of the app's API keys; a key is shown once, when
	// it is made, and never stored.
	Keys []AppKey `json:"keys,omitempty"`
	// HMACSecrets sign requests (package sign); unlike API keys they must
	// be kept, so protect the bucket (NATS permissions per role).
	HMACSecrets []HMACSecret `json:"hmac_secrets,omitempty"`
	// APIs the app may call: names, or globs ending in ".*" ("orders.*"),
	// or "*".
	APIs []string `json:"apis,omitempty"`
	// IPAllow, when set, lists the only client addresses (or CIDRs) the app
	// may call from.
	IPAllow []string `json:"ip_allow,omitempty"`
	// RateLimit, when set, caps the app's calls across every API, on each
	// edge (429 RATE_LIMITED past it).
	RateLimit *AppLimit `json:"rate_limit,omitempty"`
	// JWT, when set, is the app's own token issuer: a bearer token whose
	// iss is Issuer is checked with these settings (never an API's) and,
	// if valid, is this app's, whatever its claims say. For partners who
	// sign tokens with their own keys.
	JWT *JWTAuth `json:"jwt,omitempty"`
	// Sandbox marks an app whose calls go to the sandbox tier of each API
	// (API.Sandbox), never to production; an API without one answers it
	// 403 NO_SANDBOX. Flipping it is live on every edge at once.
	Sandbox bool `json:"sandbox,omitempty"`
	// CertNames are the names a verified TLS client certificate may carry
	// to be this app's, on APIs with the mtls method: one of its DNS, URI
	// or email SANs, or its subject common name when it has no SAN.
	CertNames []string `json:"cert_names,omitempty"`
	// CertCA is the SHA-256 fingerprint (hex) of the CA certificate that
	// must be in the verified chain of the app's certificates: an API's
	// CA may sign for several partners, and none may claim another's
	// names. Required with CertNames.
	CertCA string `json:"cert_ca,omitempty"`

	Revision uint64 `json:"-"`
}

// AppLimit is an app's own limit: Limit calls per Window (default 1s).
type AppLimit struct {
	Limit  int      `json:"limit"`
	Window Duration `json:"window,omitempty"`
}

// AppKey is the digest of one API key.
type AppKey struct {
	ID      string    `json:"id"`
	SHA256  string    `json:"sha256"`
	Created time.Time `json:"created"`
}

// HMACSecret is one secret an app signs requests with.
type HMACSecret struct {
	ID      string    `json:"id"`
	Secret  string    `json:"secret"` // base64url, 32 bytes or more
	Created time.Time `json:"created"`
}

// Bytes decodes the secret.
func (h HMACSecret) Bytes() []byte {
	b, _ := base64.RawURLEncoding.DecodeString(h.Secret)
	return b
}

// NewHMACSecret makes a random 32-byte signing secret.
func NewHMACSecret() (HMACSecret, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return HMACSecret{}, fmt.Errorf("making a secret: %w", err)
	}
	enc := base64.RawURLEncoding.EncodeToString(b[:])
	return HMACSecret{ID: "hs_" + enc[:6], Secret: enc, Created: time.Now().UTC()}, nil
}

// KeyDigest is how an API key is stored and looked up.
func KeyDigest(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// NewAPIKey makes a random API key ("jw_" + 32 random bytes) and its
// record for the app.
func NewAPIKey() (key string, rec AppKey, err error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", AppKey{}, fmt.Errorf("making a key: %w", err)
	}
	key = "jw_" + base64.RawURLEncoding.EncodeToString(b[:])
	return key, AppKey{ID: key[:9], SHA256: KeyDigest(key), Created: time.Now().UTC()}, nil
}

// Granted reports whether the app may call api.
func (a *App) Granted(api string) bool {
	for _, g := range a.APIs {
		switch {
		case g == "*" || g == api:
			return true
		case strings.HasSuffix(g, ".*") && strings.HasPrefix(api, strings.TrimSuffix(g, "*")):
			return true
		}
	}
	return false
}

// Marshal returns the app's JSON.
func (a *App) Marshal() []byte {
	b, _ := json.Marshal(a)
	return b
}

// ParseApp decodes and checks an app stored under key.
func ParseApp(key string, doc []byte) (*App, error) {
	var ps []schemas.Problem
	add := func(path, format string, args ...any) {
		ps = append(ps, schemas.Problem{Path: path, Message: fmt.Sprintf(format, args...)})
	}
	var a App
	if err := strictJSON(doc, &a); err != nil {
		return nil, &ValidationError{Key: key, Problems: []schemas.Problem{{Message: err.Error()}}}
	}
	if err := bus.ValidName(a.ID); err != nil {
		add("id", "%v", err)
	} else if key != "" && key != a.ID {
		add("id", "must equal the key it is stored under (%q)", key)
	}
	if a.Status != AppActive && a.Status != AppDisabled {
		add("status", "must be active or disabled")
	}
	for i, k := range a.Keys {
		if len(k.SHA256) != 64 {
			add(fmt.Sprintf("keys.%d.sha256", i), "must be a SHA-256 digest in hex")
		}
	}
	for i, h := range a.HMACSecrets {
		if len(h.Bytes()) < 32 {
			add(fmt.Sprintf("hmac_secrets.%d.secret", i), "must be 32 bytes or more, base64url")
		}
	}
	for _, g := range a.APIs {
		name := strings.TrimSuffix(g, ".*")
		if g != "*" && bus.ValidName(name) != nil {
			add("apis", "%q is not an API name, a \"prefix.*\" glob or \"*\"", g)
		}
	}
	if _, err := ParsePrefixes(a.IPAllow); err != nil {
		add("ip_allow", "%v", err)
	}
	if j := a.JWT; j != nil {
		j.check("jwt", add)
		if j.Issuer == "" {
			add("jwt.issuer", "is required: it tells the app's tokens from others")
		}
		if j.AppClaim != "" {
			add("jwt.app_claim", "is not used: the issuer names the app")
		}
	}
	if len(a.CertNames) > 0 && !validFingerprint(a.CertCA) {
		add("cert_ca", "must be the SHA-256 fingerprint (64 hex digits) of the CA that signs the app's certificates, with cert_names")
	}
	for i, n := range a.CertNames {
		if n == "" || len(n) > 255 || strings.ContainsAny(n, "\x00\r\n") {
			add(fmt.Sprintf("cert_names.%d", i), "must be a name of 1 to 255 characters on one line")
		}
	}
	if l := a.RateLimit; l != nil {
		rule := RateLimit{Limit: l.Limit, Window: l.Window}
		addJoined("rate_limit", rule.Rule().Validate(), add)
	}
	if len(ps) > 0 {
		return nil, &ValidationError{Key: key, Problems: ps}
	}
	return &a, nil
}

// strictJSON decodes JSON or YAML, refusing unknown fields.
func strictJSON(doc []byte, v any) error {
	js, err := ToJSON(doc)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(strings.NewReader(string(js)))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// OpenApps opens the jetway_apps bucket, creating it when missing.
func OpenApps(ctx context.Context, js jetstream.JetStream, o BucketOptions) (jetstream.KeyValue, error) {
	return openBucket(ctx, js, jetstream.KeyValueConfig{
		Bucket:      BucketApps,
		Description: "Jetway apps: credentials (digests only) and grants (key = app id)",
		History:     HistoryDepth,
		Replicas:    max(o.Replicas, 1),
	})
}

// validFingerprint reports whether s is a SHA-256 digest in lower-case hex.
func validFingerprint(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if (s[i] < '0' || s[i] > '9') && (s[i] < 'a' || s[i] > 'f') {
			return false
		}
	}
	return true
}

// CertFingerprint is a certificate's SHA-256 fingerprint as CertCA holds
// it: lower-case hex of its DER.
func CertFingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}
