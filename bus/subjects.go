// Package bus holds everything Jetway nodes share about NATS: how to
// connect, how to embed a server, and the wire between edge and worker
// (subjects, queue groups and header names).
package bus

import (
	"fmt"
	"regexp"
)

// Subject and queue group prefixes. An API's requests travel on
// APIPrefix+name; every worker of the API's pool subscribes to that subject
// in the queue group QueuePrefix+pool, so each request reaches exactly one
// worker of the pool. An API's sandbox tier travels on SandboxPrefix+name.
const (
	APIPrefix     = "jetway.api."
	SandboxPrefix = "jetway.sandbox."
	QueuePrefix   = "jetway.pool."
)

// MaxNameLen bounds API and pool names; they become NATS subject tokens and
// KV keys, and show up in metrics labels.
const MaxNameLen = 128

// namePattern admits dot-separated tokens of letters, digits, '_' and '-'.
// It can never produce a NATS wildcard ('*', '>'), whitespace, an empty
// token or a leading/trailing dot.
var namePattern = regexp.MustCompile(`^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$`)

// ValidName reports whether s may be used as an API or pool name.
func ValidName(s string) error {
	if s == "" {
		return fmt.Errorf("must not be empty")
	}
	if len(s) > MaxNameLen {
		return fmt.Errorf("must be at most %d characters", MaxNameLen)
	}
	if !namePattern.MatchString(s) {
		return fmt.Errorf("must be dot-separated tokens of letters, digits, '_' and '-' (got %q)", s)
	}
	return nil
}

// APISubject is the subject an API's requests are published on. The name
// must have passed ValidName.
func APISubject(api string) string { return APIPrefix + api }

// SandboxSubject is the subject of the calls to an API's sandbox tier: a
// subject space of its own, so sandbox traffic never reaches a production
// subscription.
func SandboxSubject(api string) string { return SandboxPrefix + api }

// QueueGroup is the queue group of a pool's workers.
func QueueGroup(pool string) string { return QueuePrefix + pool }
