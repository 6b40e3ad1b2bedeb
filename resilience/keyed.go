package resilience

import (
	"hash/maphash"
	"maps"
	"sync"
	"time"
)

// Keyed is one rule applied per key value: every distinct key (an app id, a
// client IP, "app|region", ... — whatever string the edge builds) gets its
// own limiter of the rule's behaviour, sharing no state with any other
// key. A key listed in the rule's Exceptions gets its own limit instead of
// Limit (hot values, like Sentinel's ParamFlowRule item list); an exception
// of 0 refuses every call of that key.
//
// Memory is bounded: at most MaxKeys keys are tracked. When a new key
// arrives at a full table, the least recently used key is evicted, and a
// key seen again after its eviction starts fresh: a full window for reject,
// cold for warmup, an empty queue, nothing in flight. Evicting a key idle
// for longer than its window (reject), its warm-up period (warmup) or its
// last reserved slot (queue) loses nothing, since its limiter would be fresh
// by then anyway; size MaxKeys above the number of keys active at once
// within a window, or a busy key may be forgotten and readmitted early.
// A concurrency key with calls in flight is never evicted; a new key that
// finds the table full of such keys is refused (Decision with RetryAfter 0).
//
// From MaxKeys 512 up, the table is split by key hash into 2 to 16 shards
// with their own lock and LRU order, each holding MaxKeys/shards keys; a
// key is then evicted when its shard is full, and the evicted key is the
// least recently used of its shard.
//
// Safe for concurrent use. Take on a tracked key does not allocate; a new
// key allocates its limiter (or reuses the evicted one's).
type Keyed struct {
	rule   RuleConfig // defaults applied
	shards []keyedShard
	mask   uint64
	seed   maphash.Seed
}

type keyedShard struct {
	mu         sync.Mutex
	m          map[string]*keyedEntry
	head, tail *keyedEntry // most and least recently used
	capacity   int
	evictions  uint64
	_          [64]byte // keep shards' locks on separate cache lines
}

type keyedEntry struct {
	key        string
	prev, next *keyedEntry
	lim        keyedLimiter
}

// NewKeyed returns a per-key limiter for the rule cfg, any behaviour. It
// returns every problem of cfg (see RuleConfig.Validate).
func NewKeyed(cfg RuleConfig) (*Keyed, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	rule := cfg.withDefaults()
	rule.Exceptions = maps.Clone(cfg.Exceptions)
	n := 1
	for n < 16 && rule.MaxKeys/(2*n) >= 256 {
		n *= 2
	}
	k := &Keyed{rule: rule, shards: make([]keyedShard, n), mask: uint64(n - 1), seed: maphash.MakeSeed()}
	for i := range k.shards {
		c := rule.MaxKeys / n
		if i < rule.MaxKeys%n {
			c++
		}
		k.shards[i] = keyedShard{m: make(map[string]*keyedEntry), capacity: c}
	}
	return k, nil
}

// Take asks to admit one call of key at time now, against that key's
// limiter; the Decision means what it means for Limiter.Take (maxWait only
// matters to queues; Release the Decision of a concurrency rule when the
// call ends). A new key is tracked from now on, possibly evicting the
// least recently used one; see Keyed.
func (k *Keyed) Take(key string, now time.Time, maxWait time.Duration) Decision {
	sh := k.shard(key)
	sh.mu.Lock()
	e := sh.m[key]
	if e != nil {
		sh.toFront(e)
	} else if e = k.add(sh, key); e == nil {
		sh.mu.Unlock()
		return Decision{}
	}
	d := e.lim.takeKeyed(now, maxWait)
	sh.mu.Unlock()
	return d
}

// LimitFor returns the limit that applies to key: its exception, or the
// rule's Limit.
func (k *Keyed) LimitFor(key string) int {
	if n, ok := k.rule.Exceptions[key]; ok {
		return n
	}
	return k.rule.Limit
}

// Rule returns the rule, with defaults applied.
func (k *Keyed) Rule() RuleConfig {
	r := k.rule
	r.Exceptions = maps.Clone(r.Exceptions)
	return r
}

// Len returns the number of keys tracked.
func (k *Keyed) Len() int {
	n := 0
	for i := range k.shards {
		sh := &k.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// Evictions returns the number of keys evicted so far to make room.
func (k *Keyed) Evictions() uint64 {
	var n uint64
	for i := range k.shards {
		sh := &k.shards[i]
		sh.mu.Lock()
		n += sh.evictions
		sh.mu.Unlock()
	}
	return n
}

func (k *Keyed) shard(key string) *keyedShard {
	if k.mask == 0 {
		return &k.shards[0]
	}
	return &k.shards[maphash.String(k.seed, key)&k.mask]
}

// add tracks a new key in sh (locked) and returns its entry, or nil if the
// shard is full of keys that cannot be evicted.
func (k *Keyed) add(sh *keyedShard, key string) *keyedEntry {
	limit := k.LimitFor(key)
	var e *keyedEntry
	if len(sh.m) >= sh.capacity {
		e = sh.tail
		for e != nil && e.lim.busy() {
			e = e.prev
		}
		if e == nil {
			return nil
		}
		sh.unlink(e)
		delete(sh.m, e.key)
		sh.evictions++
		e.key = key
		if limit == 0 || !e.lim.reset(limit) {
			e.lim = newRuleLimiter(k.rule, limit)
		}
	} else {
		e = &keyedEntry{key: key, lim: newRuleLimiter(k.rule, limit)}
	}
	sh.m[key] = e
	sh.pushFront(e)
	return e
}

func (sh *keyedShard) pushFront(e *keyedEntry) {
	e.prev, e.next = nil, sh.head
	if sh.head != nil {
		sh.head.prev = e
	} else {
		sh.tail = e
	}
	sh.head = e
}

func (sh *keyedShard) unlink(e *keyedEntry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		sh.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		sh.tail = e.prev
	}
	e.prev, e.next = nil, nil
}

func (sh *keyedShard) toFront(e *keyedEntry) {
	if sh.head == e {
		return
	}
	sh.unlink(e)
	sh.pushFront(e)
}
