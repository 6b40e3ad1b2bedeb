package registry

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/schemas"
)

// Role is what an admin token may do, each role all of the one below:
// a viewer reads; an operator also flips degrade and fault switches and
// purges caches; an admin also writes entries, apps and tokens.
type Role int

// The roles, weakest first.
const (
	RoleNone Role = iota
	RoleViewer
	RoleOperator
	RoleAdmin
)

var roleNames = [...]string{"", "viewer", "operator", "admin"}

func (r Role) String() string {
	if int(r) < len(roleNames) {
		return roleNames[r]
	}
	return ""
}

// ParseRole reads a role's name.
func ParseRole(s string) (Role, error) {
	for i, n := range roleNames {
		if i > 0 && n == s {
			return Role(i), nil
		}
	}
	return RoleNone, fmt.Errorf("role %q is not viewer, operator or admin", s)
}

// MarshalJSON writes a role by name.
func (r Role) MarshalJSON() ([]byte, error) { return json.Marshal(r.String()) }

// UnmarshalJSON reads a role by name.
func (r *Role) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := ParseRole(s)
	*r = v
	return err
}

// AdminToken is a stored admin API token: its name (the actor the audit
// trail shows), role and the SHA-256 digest of the secret. The secret
// itself is shown once, when the token is made, and kept nowhere.
type AdminToken struct {
	ID      string    `json:"id"`
	Name    string    `json:"name"`
	Role    Role      `json:"role"`
	Digest  string    `json:"digest"`
	Created time.Time `json:"created"`
	// Revision is the KV revision it was read at (not stored).
	Revision uint64 `json:"-"`
}

// A token is "jwa_<id>_<secret>": the id finds its entry, the secret's
// digest is checked against the entry's in constant time.
var (
	tokenIDPattern   = regexp.MustCompile(`^[0-9a-f]{16}$`)
	tokenNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$`)
)

const tokenPrefix = "jwa_"

// OpenAdminTokens opens the jetway_admin_tokens bucket, creating it when
// missing.
func OpenAdminTokens(ctx context.Context, js jetstream.JetStream, o BucketOptions) (jetstream.KeyValue, error) {
	return openBucket(ctx, js, jetstream.KeyValueConfig{
		Bucket:      bus.BucketAdminTokens,
		Description: "Jetway admin REST API tokens (digests only; key = token id): the admin only",
		History:     HistoryDepth,
		Replicas:    max(o.Replicas, 1),
	})
}

// CreateAdminToken makes a token of a role, stores its digest, and returns
// the token (the only time it is seen) with its entry.
func (c *Client) CreateAdminToken(ctx context.Context, name string, role Role) (string, *AdminToken, error) {
	var ps []schemas.Problem
	if !tokenNamePattern.MatchString(name) {
		ps = append(ps, schemas.Problem{Path: "name", Message: "1 to 64 letters, digits, '.', '_', '@' or '-', starting with a letter or digit"})
	}
	if role < RoleViewer || role > RoleAdmin {
		ps = append(ps, schemas.Problem{Path: "role", Message: "must be viewer, operator or admin"})
	}
	if ps != nil {
		return "", nil, &ValidationError{Key: "admin token", Problems: ps}
	}
	var idb [8]byte
	var secret [32]byte
	if _, err := rand.Read(idb[:]); err != nil {
		return "", nil, err
	}
	if _, err := rand.Read(secret[:]); err != nil {
		return "", nil, err
	}
	id := hex.EncodeToString(idb[:])
	token := tokenPrefix + id + "_" + base64.RawURLEncoding.EncodeToString(secret[:])
	sum := sha256.Sum256([]byte(token))
	t := &AdminToken{ID: id, Name: name, Role: role, Digest: hex.EncodeToString(sum[:]), Created: time.Now().UTC()}
	b, _ := json.Marshal(t)
	rev, err := write(ctx, c.tokens, "admin token", id, b, []WriteOption{IfRevision(0)})
	if err != nil {
		return "", nil, c.afterLanded(err, func(ctx context.Context, cc *Client, rev uint64) error {
			return errors.Join(cc.noted(ctx, "token", "put", id+" ("+name+", "+role.String()+")", rev, nil),
				fmt.Errorf("admin token %s (%s) was created, but its secret was never shown: revoke it (DELETE /v1/tokens/%s) and create another", id, name, id))
		})
	}
	t.Revision = rev
	return token, t, c.noted(ctx, "token", "put", id+" ("+name+", "+role.String()+")", rev, nil)
}

// ErrBadToken is a token that is malformed, unknown or revoked.
var ErrBadToken = errors.New("not a valid admin token")

// CheckAdminToken finds the token's entry and checks its secret.
func (c *Client) CheckAdminToken(ctx context.Context, token string) (*AdminToken, error) {
	rest, ok := strings.CutPrefix(token, tokenPrefix)
	id, _, ok2 := strings.Cut(rest, "_")
	if !ok || !ok2 || !tokenIDPattern.MatchString(id) {
		return nil, ErrBadToken
	}
	e, err := c.tokens.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, ErrBadToken
	}
	if err != nil {
		return nil, fmt.Errorf("reading admin token %s: %w", id, err)
	}
	var t AdminToken
	if err := json.Unmarshal(e.Value(), &t); err != nil {
		return nil, ErrBadToken
	}
	sum := sha256.Sum256([]byte(token))
	want, err := hex.DecodeString(t.Digest)
	if err != nil || subtle.ConstantTimeCompare(sum[:], want) != 1 {
		return nil, ErrBadToken
	}
	t.Revision = e.Revision()
	return &t, nil
}

// ListAdminTokens returns the stored tokens (digests, never secrets).
func (c *Client) ListAdminTokens(ctx context.Context) ([]*AdminToken, error) {
	all, err := listParsed(ctx, c.tokens, func(key string, doc []byte) (*AdminToken, error) {
		var t AdminToken
		err := json.Unmarshal(doc, &t)
		return &t, err
	})
	if err != nil {
		return nil, err
	}
	out := make([]*AdminToken, 0, len(all))
	for _, l := range all {
		if l.Err == nil {
			l.Value.Revision = l.Revision
			out = append(out, l.Value)
		}
	}
	return out, nil
}

// RevokeAdminToken deletes a token: it is refused from then on.
func (c *Client) RevokeAdminToken(ctx context.Context, id string) error {
	if !tokenIDPattern.MatchString(id) {
		return fmt.Errorf("admin token %q: %w", id, ErrNotFound)
	}
	if _, err := c.tokens.Get(ctx, id); errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("admin token %s: %w", id, ErrNotFound)
	} else if err != nil {
		return err
	}
	if err := c.tokens.Delete(ctx, id); err != nil {
		return c.notedLater(writeFailed(c.tokens, "delete", "admin token", id, nil, 0, err), "token", "delete", id)
	}
	return c.noted(ctx, "token", "delete", id, 0, nil)
}
