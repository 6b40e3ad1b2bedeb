package bus

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nats-io/nats-server/v2/server"
)

// NATS roles of Jetway's processes, each a NATS user.
const (
	UserAdmin  = "admin"  // serve and the CLI: may write the registry
	UserEdge   = "edge"   // edges: read the registry, request APIs, claim nonces
	UserWorker = "worker" // workers: read the registry, serve APIs
)

// registryWrites are the subjects that change the registry buckets or any
// stream: only the admin user may publish on them, so a compromised edge or
// worker cannot rewrite what every node serves.
var registryWrites = []string{
	"$KV.jetway_apis.>", "$KV.jetway_flags.>", "$KV.jetway_apps.>", "$KV.jetway_alerts.>",
	"$JS.API.STREAM.CREATE.>", "$JS.API.STREAM.UPDATE.>", "$JS.API.STREAM.DELETE.>",
	"$JS.API.STREAM.PURGE.>", "$JS.API.STREAM.MSG.DELETE.>", "$JS.API.STREAM.RESTORE.>",
}

// RolePermissions are the least-privilege permissions of a role (nil:
// everything, for the admin). The same lists serve an external cluster's
// configuration (see deploy/nats).
func RolePermissions(role string) *server.Permissions {
	deny := append([]string(nil), registryWrites...)
	switch role {
	case UserAdmin:
		return nil
	case UserWorker:
		deny = append(deny, "$KV.jetway_nonces.>") // only edges check signatures
	}
	return &server.Permissions{Publish: &server.SubjectPermission{Allow: []string{">"}, Deny: deny}}
}

// Credentials are the passwords of the three roles on the embedded server.
type Credentials map[string]string

// LoadOrCreateCredentials reads the role passwords from path, or makes
// random ones and writes them there (mode 0600) when the file is missing.
func LoadOrCreateCredentials(path string) (Credentials, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		var c Credentials
		if err := json.Unmarshal(b, &c); err != nil || c[UserAdmin] == "" || c[UserEdge] == "" || c[UserWorker] == "" {
			return nil, fmt.Errorf("credentials file %s is damaged: delete it to make new ones", path)
		}
		return c, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	c := Credentials{}
	for _, u := range []string{UserAdmin, UserEdge, UserWorker} {
		var r [24]byte
		if _, err := rand.Read(r[:]); err != nil {
			return nil, err
		}
		c[u] = base64.RawURLEncoding.EncodeToString(r[:])
	}
	b, _ = json.MarshalIndent(c, "", "  ")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return nil, fmt.Errorf("writing %s: %w", path, err)
	}
	return c, nil
}

// users are the server users of the credentials.
func (c Credentials) users() []*server.User {
	var out []*server.User
	for _, u := range []string{UserAdmin, UserEdge, UserWorker} {
		out = append(out, &server.User{Username: u, Password: c[u], Permissions: RolePermissions(u)})
	}
	return out
}
