package registry

import (
	"context"
	"net/http"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
)

// Cache is an API's response cache at the edges: a cacheable answer is
// kept in each edge's memory and served from there to the calls with the
// same key until it is stale. The backend of a cached call sees exactly
// what the key holds — method, host, path, the query (or its keyed
// parameters), the keyed headers and, when keyed, the app — so a response
// can never depend on something that is not in its key (cache poisoning).
type Cache struct {
	// TTL is how long an answer is fresh when its Cache-Control gives no
	// max-age (or IgnoreCacheControl is set).
	TTL Duration `json:"ttl"`
	// Methods are the cacheable methods: GET and HEAD (the default).
	Methods []string `json:"methods,omitempty"`
	// Statuses are the cacheable statuses; default 200, 203, 204, 300,
	// 301, 404, 410.
	Statuses []int     `json:"statuses,omitempty"`
	Key      *CacheKey `json:"key,omitempty"`
	// StaleWhileRevalidate serves an answer this long past its freshness
	// while one background call refreshes it.
	StaleWhileRevalidate Duration `json:"stale_while_revalidate,omitempty"`
	// StaleIfError serves an answer this long past its freshness when the
	// call fails (a gateway error or a 5xx).
	StaleIfError Duration `json:"stale_if_error,omitempty"`
	// IgnoreCacheControl: the backend's Cache-Control (no-store, private,
	// no-cache, max-age, s-maxage) does not decide; TTL does.
	IgnoreCacheControl bool `json:"ignore_cache_control,omitempty"`
	// MaxEntry is the largest body kept (default 256KiB); MaxSize bounds
	// the API's cache on each edge (default 16MiB).
	MaxEntry Size `json:"max_entry,omitempty"`
	MaxSize  Size `json:"max_size,omitempty"`
	// Shared also keeps the answers in the jetway_cache bucket (JetStream
	// KV, in memory, each answer with its own TTL), where every edge looks
	// on a miss of its own: a burst spread over the edges reaches the
	// backend about once, not once per edge.
	Shared bool `json:"shared,omitempty"`
}

// CacheKey says what, besides method, host, path and query, tells cached
// answers apart.
type CacheKey struct {
	// Headers are request headers that are keyed, and the only caller
	// headers a cached call's backend gets.
	Headers []string `json:"headers,omitempty"`
	// Query, when set, lists the query parameters that are keyed: the
	// others are dropped from the call. Default: the whole query is keyed.
	Query []string `json:"query,omitempty"`
	// App keys the calling app (and tells the backend who it is); default
	// true for an API that authenticates.
	App *bool `json:"app,omitempty"`
}

// Cache defaults and bounds.
const (
	DefaultCacheMaxEntry = Size(256 << 10)
	DefaultCacheMaxSize  = Size(16 << 20)
	MaxCacheSize         = Size(1 << 30)
	MaxCacheTTL          = 7 * 24 * time.Hour
	// MaxSharedEntry is the largest max_entry of a shared cache: an answer
	// and its headers fit the default NATS max payload (1MiB).
	MaxSharedEntry = Size(960 << 10)
	// SharedCacheMaxBytes bounds the jetway_cache bucket; past it the
	// oldest answers go first.
	SharedCacheMaxBytes = 256 << 20
)

// BucketCache is the shared response cache (cache.shared): edges read and
// write it.
const BucketCache = bus.BucketCache

// OpenCache opens the jetway_cache bucket, creating it when missing: in
// memory (a cache; a restart empties it), one revision per key, answers
// with their own TTL (LimitMarkerTTL turns per-message TTLs on; the
// marker an expiry leaves lives a second).
func OpenCache(ctx context.Context, js jetstream.JetStream, o BucketOptions) (jetstream.KeyValue, error) {
	return openBucket(ctx, js, jetstream.KeyValueConfig{
		Bucket:         BucketCache,
		Description:    "Jetway shared response cache (cache.shared): edges read and write",
		History:        1,
		Storage:        jetstream.MemoryStorage,
		MaxBytes:       SharedCacheMaxBytes,
		LimitMarkerTTL: time.Second,
		Replicas:       max(o.Replicas, 1),
	})
}

// DefaultCacheStatuses are the statuses cached when an entry names none.
var DefaultCacheStatuses = []int{200, 203, 204, 300, 301, 404, 410}

func (c *Cache) applyDefaults() {
	if len(c.Methods) == 0 {
		c.Methods = []string{http.MethodGet, http.MethodHead}
	}
	if len(c.Statuses) == 0 {
		c.Statuses = DefaultCacheStatuses
	}
	if c.MaxEntry == 0 {
		c.MaxEntry = DefaultCacheMaxEntry
	}
	if c.MaxSize == 0 {
		c.MaxSize = DefaultCacheMaxSize
	}
}

// KeysApp reports whether the app is part of the key, for an API that
// authenticates (auth) or not.
func (c *Cache) KeysApp(auth bool) bool {
	if c.Key != nil && c.Key.App != nil {
		return *c.Key.App
	}
	return auth
}

// checkWithRewrite refuses request headers, and query parameters when
// cache.key.query lists them, that a rewrite sets or adds and the cache
// does not key: the backend of a cached call gets only keyed ones, so
// those would silently never reach it.
func (c *Cache) checkWithRewrite(prefix string, r *Rewrite, add func(path, format string, args ...any)) {
	if c == nil || r == nil || r.Request == nil {
		return
	}
	if q := r.Request.Query; q != nil && c.Key != nil && c.Key.Query != nil {
		for _, m := range []map[string]string{q.Set, q.Add} {
			for name := range m {
				if !slices.Contains(c.Key.Query, name) {
					add(prefix+".request.query", "%s is not in cache.key.query: a cached call's backend gets only keyed parameters, so it would never arrive", name)
				}
			}
		}
	}
	if r.Request.Headers == nil {
		return
	}
	keyed := map[string]bool{}
	if c.Key != nil {
		for _, h := range c.Key.Headers {
			keyed[http.CanonicalHeaderKey(h)] = true
		}
	}
	for _, m := range []map[string]string{r.Request.Headers.Set, r.Request.Headers.Add} {
		for h := range m {
			if !keyed[http.CanonicalHeaderKey(h)] {
				add(prefix+".request.headers", "%s is not in cache.key.headers: a cached call's backend gets only keyed headers, so it would never arrive", http.CanonicalHeaderKey(h))
			}
		}
	}
}

// check adds the cache's problems at prefix.
func (c *Cache) check(prefix string, add func(path, format string, args ...any)) {
	if c == nil {
		return
	}
	if c.TTL <= 0 || time.Duration(c.TTL) > MaxCacheTTL {
		add(prefix+".ttl", "must be between 1ms and %v", MaxCacheTTL)
	}
	for _, d := range []struct {
		name string
		v    Duration
	}{{"stale_while_revalidate", c.StaleWhileRevalidate}, {"stale_if_error", c.StaleIfError}} {
		if d.v < 0 || time.Duration(d.v) > MaxCacheTTL {
			add(prefix+"."+d.name, "must be between 0 and %v", MaxCacheTTL)
		}
	}
	for _, m := range c.Methods {
		if m != http.MethodGet && m != http.MethodHead {
			add(prefix+".methods", "only GET and HEAD are cached (a body is never part of the key), not %s", m)
		}
	}
	if c.MaxSize > MaxCacheSize {
		add(prefix+".max_size", "must be at most %v", MaxCacheSize)
	}
	if c.MaxEntry != 0 && c.MaxSize != 0 && c.MaxEntry > c.MaxSize {
		add(prefix+".max_entry", "must not exceed max_size")
	}
	if c.Shared && c.MaxEntry > MaxSharedEntry {
		add(prefix+".max_entry", "must be at most %v in a shared cache (an answer is one NATS message)", MaxSharedEntry)
	}
	if k := c.Key; k != nil {
		for _, h := range k.Headers {
			if !validHeaderName(h) {
				add(prefix+".key.headers", "%q is not a header name", h)
			}
		}
		if slices.Contains(k.Query, "") {
			add(prefix+".key.query", "a parameter name must not be empty")
		}
	}
}
