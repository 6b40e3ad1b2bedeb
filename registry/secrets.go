package registry

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	natsjwt "github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/schemas"
)

// BucketSecrets holds the credentials backends use, by pool: key
// <name>.<pool> (bus.SecretKey). An entry names a secret, never holds
// it, so api get, the audit trail and the history show where a backend
// goes but not how it logs in. The admin writes; a worker reads its own
// pools' keys, one at a time (bus.SecretRead), and nothing else of the
// bucket.
const BucketSecrets = bus.BucketSecrets

// MaxSecretSize bounds one secret's value.
const MaxSecretSize = 64 << 10

// secretName is how an entry names a secret: no dots, so that the key
// <name>.<pool> names one pool.
var secretName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// CheckSecretName reports a name a secret cannot have.
func CheckSecretName(name string) error {
	if !secretName.MatchString(name) {
		return fmt.Errorf("secret name must be 1-64 of a-z, 0-9, '_' and '-', starting with a letter or digit (got %q)", name)
	}
	return nil
}

// SecretRef names a secret of the API's pool.
type SecretRef struct {
	Secret string `json:"secret"`
}

// NATSServer is the value of a secret a nats backend's "server" names:
// another NATS system to call services on, and how to log in to it. At
// most one of user/password, token and creds.
type NATSServer struct {
	// URL is one server or a comma-separated list (nats://, tls://).
	URL      string `json:"url"`
	User     string `json:"user,omitempty"`
	Password string `json:"password,omitempty"`
	Token    string `json:"token,omitempty"`
	// Creds is the text of a .creds file (a user JWT and its seed).
	Creds string `json:"creds,omitempty"`
	// CA is a PEM bundle the server's certificate is checked with; when
	// empty, the system's roots are (tls:// URLs, or a server that asks
	// for TLS).
	CA string `json:"ca,omitempty"`
}

// ParseNATSServer reads and checks a NATS server secret.
func ParseNATSServer(b []byte) (*NATSServer, error) {
	if len(b) > MaxSecretSize {
		return nil, fmt.Errorf("secret is %d bytes, over the %d byte limit", len(b), MaxSecretSize)
	}
	var s NATSServer
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&s); err != nil {
		return nil, fmt.Errorf("a NATS server secret is JSON {url, user, password, token, creds, ca}: %v", err)
	}
	if d.More() {
		return nil, errors.New("a NATS server secret is one JSON object")
	}
	if s.URL == "" {
		return nil, errors.New("url is required (nats://host:4222, or a comma-separated list)")
	}
	for u := range strings.SplitSeq(s.URL, ",") {
		p, err := url.Parse(strings.TrimSpace(u))
		if err != nil || p.Host == "" || (p.Scheme != "nats" && p.Scheme != "tls") || p.User != nil || (p.Path != "" && p.Path != "/") {
			return nil, fmt.Errorf("url %q must be nats://host:port or tls://host:port (credentials go in user, password, token or creds)", u)
		}
		if port := p.Port(); port != "" && !validPort(port) {
			return nil, fmt.Errorf("url %q has a bad port", u)
		}
	}
	logins := 0
	if s.User != "" || s.Password != "" {
		if s.User == "" || s.Password == "" {
			return nil, errors.New("user and password come together")
		}
		logins++
	}
	if s.Token != "" {
		logins++
	}
	if s.Creds != "" {
		if _, _, err := ParseCreds(s.Creds); err != nil {
			return nil, err
		}
		logins++
	}
	if logins > 1 {
		return nil, errors.New("give one of user/password, token or creds")
	}
	if s.CA != "" && !x509.NewCertPool().AppendCertsFromPEM([]byte(s.CA)) {
		return nil, errors.New("ca holds no PEM certificate")
	}
	return &s, nil
}

// ParseCreds reads the text of a .creds file: the user JWT and seed.
func ParseCreds(creds string) (userJWT, seed string, err error) {
	userJWT, err = natsjwt.ParseDecoratedJWT([]byte(creds))
	if err == nil && userJWT == "" {
		err = errors.New("no JWT")
	}
	if err != nil {
		return "", "", fmt.Errorf("creds is not a .creds file's text: %v", err)
	}
	kp, err := natsjwt.ParseDecoratedUserNKey([]byte(creds))
	if err != nil {
		return "", "", fmt.Errorf("creds holds no user seed: %v", err)
	}
	s, err := kp.Seed()
	if err != nil {
		return "", "", fmt.Errorf("creds holds no user seed: %v", err)
	}
	return userJWT, string(s), nil
}

// OpenSecrets opens the jetway_secrets bucket, creating it when missing.
// One value per key: a replaced or deleted secret is gone from the store.
func OpenSecrets(ctx context.Context, js jetstream.JetStream, o BucketOptions) (jetstream.KeyValue, error) {
	return openBucket(ctx, js, jetstream.KeyValueConfig{
		Bucket:       BucketSecrets,
		Description:  "Jetway backend secrets (key = <name>.<pool>): admin writes, each pool's workers read their own",
		History:      1,
		MaxValueSize: MaxSecretSize,
		Replicas:     max(o.Replicas, 1),
	})
}

// SecretInfo describes a stored secret, never its value.
type SecretInfo struct {
	Pool     string
	Name     string
	Revision uint64
	Updated  time.Time
	Size     int
	Err      error // set when the stored value is not a valid secret
}

// PutSecret stores a NATS server secret as name for pool's workers,
// replacing the one stored there. The audit trail records that it
// changed, not its value. A bad name or value is a *ValidationError.
func (c *Client) PutSecret(ctx context.Context, pool, name string, value []byte) (uint64, error) {
	if err := secretKeyCheck(pool, name); err != nil {
		return 0, err
	}
	if _, err := ParseNATSServer(value); err != nil {
		return 0, &ValidationError{Key: bus.SecretKey(pool, name), Problems: []schemas.Problem{{Path: "", Message: err.Error()}}}
	}
	key := bus.SecretKey(pool, name)
	// write: no answer is *OutcomeUnknownError, which the revision read
	// before tells apart from an earlier write of the same value.
	rev, err := write(ctx, c.secrets, "secret", key, value, nil)
	if err != nil {
		return 0, c.notedLater(err, "secret", "put", key)
	}
	return rev, c.noted(ctx, "secret", "put", key, rev, nil)
}

// DeleteSecret removes a secret; workers that hold a connection made with
// it close it within their next check (natsbackend).
func (c *Client) DeleteSecret(ctx context.Context, pool, name string) error {
	if err := secretKeyCheck(pool, name); err != nil {
		return err
	}
	key := bus.SecretKey(pool, name)
	if _, err := c.secrets.Get(ctx, key); errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("secret %s of pool %s: %w", name, pool, ErrNotFound)
	} else if err != nil {
		return err
	}
	if err := c.secrets.Purge(ctx, key); err != nil {
		return c.notedLater(writeFailed(c.secrets, "delete", "secret", key, nil, 0, err), "secret", "delete", key)
	}
	return c.noted(ctx, "secret", "delete", key, 0, nil)
}

// ListSecrets describes the stored secrets of pool, or of every pool when
// pool is "", sorted by pool and name.
func (c *Client) ListSecrets(ctx context.Context, pool string) ([]SecretInfo, error) {
	keys, err := c.secrets.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	var out []SecretInfo
	for k := range keys.Keys() {
		name, p, _ := strings.Cut(k, ".")
		if pool != "" && p != pool {
			continue
		}
		e, err := c.secrets.Get(ctx, k)
		if err != nil {
			continue // deleted since the listing
		}
		info := SecretInfo{Pool: p, Name: name, Revision: e.Revision(), Updated: e.Created(), Size: len(e.Value())}
		_, info.Err = ParseNATSServer(e.Value())
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b SecretInfo) int {
		return strings.Compare(a.Pool+"\x00"+a.Name, b.Pool+"\x00"+b.Name)
	})
	return out, nil
}

// secretKeyCheck is a *ValidationError for a pool or name a secret
// cannot have.
func secretKeyCheck(pool, name string) error {
	var probs []schemas.Problem
	if err := bus.ValidName(pool); err != nil {
		probs = append(probs, schemas.Problem{Path: "pool", Message: err.Error()})
	}
	if err := CheckSecretName(name); err != nil {
		probs = append(probs, schemas.Problem{Path: "name", Message: err.Error()})
	}
	if probs != nil {
		return &ValidationError{Key: name + "." + pool, Problems: probs}
	}
	return nil
}

// checkSecretRef checks, at publish, that the secret a nats backend names
// is stored for the API's pool: an entry that could only fail is refused
// before any call.
func (c *Client) checkSecretRef(ctx context.Context, path, pool string, b *Backend) error {
	if b == nil || b.Type != BackendNATS || b.Server == nil {
		return nil
	}
	_, err := c.secrets.Get(ctx, bus.SecretKey(pool, b.Server.Secret))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		err = fmt.Errorf("secret %s of pool %s is not stored (jetway secret put %s FILE --pool %s)", b.Server.Secret, pool, b.Server.Secret, pool)
	}
	if err != nil {
		return &ValidationError{Problems: []schemas.Problem{{Path: path, Message: err.Error()}}}
	}
	return nil
}

// ErrSecretNotFound is LoadSecret's error for a secret that is not stored.
var ErrSecretNotFound = errors.New("secret not found")

// LoadSecret reads the secret name of pool with one direct get, the only
// read of the bucket a worker's user may make (bus.SecretRead). It returns
// the value and its revision; ErrSecretNotFound when it is not stored.
func LoadSecret(ctx context.Context, nc *nats.Conn, pool, name string) ([]byte, uint64, error) {
	if err := secretKeyCheck(pool, name); err != nil {
		return nil, 0, err
	}
	m, err := directGet(ctx, nc, "KV_"+bus.BucketSecrets, "$KV."+bus.BucketSecrets+"."+bus.SecretKey(pool, name))
	if errors.Is(err, ErrNotFound) {
		return nil, 0, fmt.Errorf("secret %s of pool %s: %w", name, pool, ErrSecretNotFound)
	} else if err != nil {
		return nil, 0, fmt.Errorf("reading secret %s of pool %s: %w", name, pool, err)
	}
	rev, _ := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
	return m.Data, rev, nil
}
