package resilience

import (
	"container/list"
	"net/http"
	"sync"
	"time"
)

// LastGood keeps the last good response to each request (by a key the
// caller builds, such as method, path and query), bounded in entries (least
// recently used evicted first) and in age. Fallbacks and degrade switches
// answer from it. Safe for concurrent use.
type LastGood struct {
	mu      sync.Mutex
	max     int
	ttl     time.Duration
	order   *list.List // of *Cached, most recent first
	entries map[string]*list.Element
}

// Cached is a stored response. Its fields are shared by every reader and
// must not be modified.
type Cached struct {
	Key    string
	At     time.Time
	Status int
	Header http.Header
	Body   []byte
}

// Defaults of NewLastGood.
const (
	DefaultLastGoodEntries = 1000
	DefaultLastGoodTTL     = 10 * time.Minute
)

// NewLastGood returns a cache of at most maxEntries responses, each served
// for at most ttl after it was stored; zero values take the defaults.
func NewLastGood(maxEntries int, ttl time.Duration) *LastGood {
	if maxEntries <= 0 {
		maxEntries = DefaultLastGoodEntries
	}
	if ttl <= 0 {
		ttl = DefaultLastGoodTTL
	}
	return &LastGood{max: maxEntries, ttl: ttl, order: list.New(), entries: map[string]*list.Element{}}
}

// Put stores a copy of a response (its header and body may be reused by
// the caller afterwards).
func (c *LastGood) Put(key string, now time.Time, status int, h http.Header, body []byte) {
	e := &Cached{Key: key, At: now, Status: status, Header: h.Clone(), Body: append([]byte(nil), body...)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.entries[key]; ok {
		el.Value = e
		c.order.MoveToFront(el)
		return
	}
	c.entries[key] = c.order.PushFront(e)
	for c.order.Len() > c.max {
		old := c.order.Remove(c.order.Back()).(*Cached)
		delete(c.entries, old.Key)
	}
}

// Get returns the stored response for key if it is younger than the TTL.
func (c *LastGood) Get(key string, now time.Time) *Cached {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.entries[key]
	if !ok {
		return nil
	}
	e := el.Value.(*Cached)
	if now.Sub(e.At) > c.ttl {
		c.order.Remove(el)
		delete(c.entries, key)
		return nil
	}
	c.order.MoveToFront(el)
	return e
}

// Len is the number of stored responses.
func (c *LastGood) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
