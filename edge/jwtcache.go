package edge

import (
	"crypto/sha256"
	"sync"
	"time"
)

// A client reuses its bearer token for many calls, and checking an ES256
// signature costs ~100 µs, most of what the edge spends on such a call. So
// a jwtVerifier remembers the tokens it accepted, for as long as they would
// still be accepted (and no longer than jwtCacheTTL), and answers a token
// it has seen with the app id it found then.
//
// What makes a cached answer right: the key is the SHA-256 of the whole
// token, so another token (a forged signature, changed claims) never
// matches; the checks that depend on the API's settings (algorithms, iss,
// aud, app claim) cannot change under a verifier, since a changed API entry
// builds a new verifier with an empty cache; the checks that depend on the
// time are redone on each hit (nbf with the leeway the parser allows, exp
// without any); and each entry names the key set it was verified against,
// so a JWKS refresh that drops a key invalidates every entry at once. Only
// accepted tokens are kept: a bad token always gets the full check and its
// precise error, and cannot push good tokens out.
const (
	jwtCacheShards = 16     // each its own lock: concurrent calls rarely share one
	jwtCacheMax    = 10_000 // entries per verifier, i.e. per API; ~1 MB when full
	// jwtCacheTTL caps how long one signature check is trusted, whatever
	// the token's exp: a long-lived token is checked again against the
	// keys of the moment at least this often, however key changes reach
	// the verifier.
	jwtCacheTTL = 5 * time.Minute
)

type jwtCache struct {
	shards [jwtCacheShards]jwtShard
}

type jwtShard struct {
	mu sync.Mutex
	m  map[[sha256.Size]byte]jwtEntry
}

// jwtEntry is what an accepted token is good for, and until when.
type jwtEntry struct {
	app   string
	keys  *map[string]any // the key set that verified it; any other: a miss
	from  int64           // Unix ns: nbf minus the leeway
	until int64           // Unix ns: the earlier of exp and the entry's TTL
}

func (c *jwtCache) shard(sum *[sha256.Size]byte) *jwtShard {
	return &c.shards[sum[0]%jwtCacheShards] // a digest's bytes are uniform
}

// get returns the app a token was accepted for, if that still holds at
// now with the key set keys. An entry that no longer holds is dropped.
func (c *jwtCache) get(sum *[sha256.Size]byte, keys *map[string]any, now time.Time) (string, bool) {
	s := c.shard(sum)
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[*sum]
	if !ok {
		return "", false
	}
	if t := now.UnixNano(); e.keys != keys || t < e.from || t >= e.until {
		delete(s.m, *sum)
		return "", false
	}
	return e.app, true
}

// put remembers an accepted token. A full shard first drops an entry at
// random (where Go's map iteration starts): no bookkeeping on hits, and
// tokens in use come back after one more signature check.
func (c *jwtCache) put(sum *[sha256.Size]byte, e jwtEntry) {
	s := c.shard(sum)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = make(map[[sha256.Size]byte]jwtEntry)
	}
	if _, ok := s.m[*sum]; !ok && len(s.m) >= jwtCacheMax/jwtCacheShards {
		for k := range s.m {
			delete(s.m, k)
			break
		}
	}
	s.m[*sum] = e
}

// len counts the entries, for tests.
func (c *jwtCache) len() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}
