package resilience

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func rlKeyed(t testing.TB, cfg RuleConfig) *Keyed {
	t.Helper()
	k, err := NewKeyed(cfg)
	if err != nil {
		t.Fatalf("NewKeyed(%+v): %v", cfg, err)
	}
	return k
}

func rlKeyedBurst(k *Keyed, key string, now time.Time, n int) (admitted int) {
	for range n {
		if k.Take(key, now, 0).Allowed {
			admitted++
		}
	}
	return admitted
}

func TestKeyedKeysAreIndependent(t *testing.T) {
	k := rlKeyed(t, RuleConfig{Limit: 3, Window: time.Minute})
	for _, key := range []string{"app-a", "app-b", "", "app-a|eu"} {
		if got := rlKeyedBurst(k, key, rlT0, 10); got != 3 {
			t.Errorf("key %q admitted %d, want 3", key, got)
		}
	}
	d := k.Take("app-a", rlAt(time.Second), 0)
	if d.Allowed || d.RetryAfter != 59*time.Second {
		t.Errorf("app-a refusal: %+v, want RetryAfter 59s", d)
	}
	// Each key's window starts at its own first call.
	if got := rlKeyedBurst(k, "late", rlAt(30*time.Second), 10); got != 3 {
		t.Errorf("late key admitted %d", got)
	}
	if got := rlKeyedBurst(k, "late", rlAt(time.Minute), 10); got != 0 {
		t.Errorf("late key admitted %d at 1m, want 0 (its window ends at 1m30s)", got)
	}
	if k.Len() != 5 || k.Evictions() != 0 {
		t.Errorf("Len %d, Evictions %d", k.Len(), k.Evictions())
	}
}

func TestKeyedHotValueExceptions(t *testing.T) {
	k := rlKeyed(t, RuleConfig{Limit: 5, Exceptions: map[string]int{
		"merchant-42": 50, // a big merchant gets more
		"item-7":      1,  // a hot item gets less
		"banned":      0,  // refused outright
	}})
	for _, tc := range []struct {
		key  string
		want int
	}{
		{"merchant-1", 5},
		{"merchant-42", 50},
		{"item-7", 1},
		{"banned", 0},
		{"merchant-43", 5},
	} {
		if got := rlKeyedBurst(k, tc.key, rlT0, 100); got != tc.want {
			t.Errorf("%q admitted %d, want %d", tc.key, got, tc.want)
		}
		if got := k.LimitFor(tc.key); got != tc.want {
			t.Errorf("LimitFor(%q) = %d, want %d", tc.key, got, tc.want)
		}
	}
	if d := k.Take("banned", rlAt(time.Hour), 0); d.Allowed || d.RetryAfter != 0 {
		t.Errorf("banned: %+v, want refused with RetryAfter 0", d)
	}
	// The rule is copied: changing the caller's map changes nothing.
	cfg := RuleConfig{Limit: 1, Exceptions: map[string]int{"x": 2}}
	k2 := rlKeyed(t, cfg)
	cfg.Exceptions["x"] = 0
	if got := rlKeyedBurst(k2, "x", rlT0, 5); got != 2 {
		t.Errorf("exception changed through the caller's map: %d", got)
	}
	r := k2.Rule()
	r.Exceptions["x"] = 9
	if k2.LimitFor("x") != 2 || k2.Rule().Window != time.Second || k2.Rule().MaxKeys != DefaultMaxKeys {
		t.Errorf("Rule: %+v", k2.Rule())
	}
}

func TestKeyedEvictsLeastRecentlyUsed(t *testing.T) {
	k := rlKeyed(t, RuleConfig{Limit: 2, MaxKeys: 3, Exceptions: map[string]int{"d": 1}})
	for _, key := range []string{"a", "b", "c"} {
		rlKeyedBurst(k, key, rlT0, 2) // exhaust each
	}
	k.Take("a", rlT0, 0) // a is now the most recent: b is the oldest
	if got := rlKeyedBurst(k, "d", rlT0, 5); got != 1 {
		t.Fatalf("d admitted %d, want 1 (its exception)", got)
	}
	if k.Len() != 3 || k.Evictions() != 1 {
		t.Fatalf("Len %d, Evictions %d, want 3, 1", k.Len(), k.Evictions())
	}
	// a, c and d are still tracked and exhausted...
	for _, key := range []string{"a", "c", "d"} {
		if k.Take(key, rlT0, 0).Allowed {
			t.Errorf("%q admitted: it should still be tracked and exhausted", key)
		}
	}
	// ...b was evicted: seen again, it starts fresh, evicting a (the
	// least recently used of d, c, a).
	if got := rlKeyedBurst(k, "b", rlT0, 5); got != 2 {
		t.Fatalf("evicted b seen again admitted %d, want a fresh 2", got)
	}
	// a comes back fresh too, evicting c; d is still tracked and
	// exhausted.
	if got := rlKeyedBurst(k, "a", rlT0, 5); got != 2 {
		t.Fatalf("a after eviction admitted %d, want 2", got)
	}
	if got := rlKeyedBurst(k, "d", rlT0, 5); got != 0 {
		t.Fatalf("d admitted %d, want 0 (still tracked)", got)
	}
	// Order now d, a, b. Evicted limiters are reused, each with the new
	// key's own limit: the exception d gets 1 after its eviction, the
	// others 2.
	if got := rlKeyedBurst(k, "c", rlT0, 5); got != 2 { // evicts b
		t.Fatalf("c after eviction admitted %d, want 2", got)
	}
	if got := rlKeyedBurst(k, "x", rlT0, 5); got != 2 { // evicts a
		t.Fatalf("x admitted %d, want 2", got)
	}
	if got := rlKeyedBurst(k, "y", rlT0, 5); got != 2 { // evicts d
		t.Fatalf("y admitted %d, want 2", got)
	}
	if got := rlKeyedBurst(k, "d", rlT0, 5); got != 1 { // evicts c, reuses its limiter
		t.Fatalf("d after eviction admitted %d, want 1 (its exception)", got)
	}
	if k.Evictions() != 7 || k.Len() != 3 {
		t.Fatalf("Evictions %d, Len %d, want 7, 3", k.Evictions(), k.Len())
	}
}

func TestKeyedEveryBehaviour(t *testing.T) {
	// Keys evicted and seen again start fresh in each behaviour; reused
	// limiters keep nothing of their previous key.
	for _, cfg := range []RuleConfig{
		{Behavior: BehaviorReject, Limit: 4, MaxKeys: 1},
		{Behavior: BehaviorWarmUp, Limit: 12, MaxKeys: 1},
		{Behavior: BehaviorQueue, Limit: 4, MaxQueue: time.Second, MaxKeys: 1},
	} {
		k := rlKeyed(t, cfg)
		first := 0
		for i := range 20 {
			key := strconv.Itoa(i % 2) // alternate: every call evicts
			at := rlAt(time.Duration(i) * time.Millisecond)
			if i < 2 {
				for range 20 {
					if k.Take(key, at, 0).Allowed {
						first++
					}
				}
				continue
			}
			if d := k.Take(key, at, 0); !d.Allowed || d.Wait != 0 {
				t.Errorf("%s: call %d of a fresh key: %+v", cfg.Behavior, i, d)
			}
		}
		solo := cfg
		solo.MaxKeys = 0
		want, _ := rlBurst(rlMust(t, solo), rlT0, 20)
		if first != 2*want {
			t.Errorf("%s: the first bursts of two keys admitted %d, want 2×%d", cfg.Behavior, first, want)
		}
		if k.Len() != 1 || k.Evictions() != 19 {
			t.Errorf("%s: Len %d, Evictions %d", cfg.Behavior, k.Len(), k.Evictions())
		}
	}
}

func TestKeyedConcurrency(t *testing.T) {
	k := rlKeyed(t, RuleConfig{Behavior: BehaviorConcurrency, Limit: 2, MaxKeys: 2, Exceptions: map[string]int{"vip": 3}})
	a1 := k.Take("a", rlT0, 0)
	a2 := k.Take("a", rlT0, 0)
	if !a1.Allowed || !a2.Allowed || k.Take("a", rlT0, 0).Allowed {
		t.Fatal("key a: want 2 in flight, then refused")
	}
	v := make([]Decision, 0, 3)
	for range 4 {
		if d := k.Take("vip", rlT0, 0); d.Allowed {
			v = append(v, d)
		}
	}
	if len(v) != 3 {
		t.Fatalf("vip admitted %d, want 3", len(v))
	}
	// The table is full of keys with calls in flight: a new key cannot
	// evict them and is refused.
	if d := k.Take("b", rlT0, 0); d.Allowed || d.RetryAfter != 0 {
		t.Fatalf("new key with a table of busy keys: %+v", d)
	}
	if k.Len() != 2 || k.Evictions() != 0 {
		t.Fatalf("Len %d, Evictions %d", k.Len(), k.Evictions())
	}
	// Once a's calls end, a can be evicted for b.
	a1.Release()
	a2.Release()
	a1.Release()
	if d := k.Take("b", rlT0, 0); !d.Allowed {
		t.Fatal("b refused after a went idle")
	} else {
		d.Release()
	}
	// a seen again starts fresh; its old (released) permits stay dead
	// even though a's limiter now serves another key.
	a2.Release()
	for _, d := range v {
		d.Release()
	}
	got := 0
	for range 5 {
		if k.Take("a", rlT0, 0).Allowed {
			got++
		}
	}
	if got != 2 {
		t.Fatalf("a after eviction: %d in flight, want 2", got)
	}
}

func TestKeyedShardsBoundMemory(t *testing.T) {
	const maxKeys = 4096
	k := rlKeyed(t, RuleConfig{Limit: 1, MaxKeys: maxKeys})
	if len(k.shards) != 16 {
		t.Fatalf("%d shards for %d keys", len(k.shards), maxKeys)
	}
	total := 0
	for i := range k.shards {
		total += k.shards[i].capacity
	}
	if total != maxKeys {
		t.Fatalf("shard capacities add up to %d", total)
	}
	for i := range 100000 {
		k.Take("ip-"+strconv.Itoa(i), rlT0, 0)
		if i%10000 == 0 && k.Len() > maxKeys {
			t.Fatalf("Len %d > %d", k.Len(), maxKeys)
		}
	}
	if n := k.Len(); n > maxKeys || n < maxKeys*9/10 {
		t.Fatalf("Len %d after 100000 keys, want close to %d", n, maxKeys)
	}
	if k.Evictions() != uint64(100000-k.Len()) {
		t.Fatalf("Evictions %d, Len %d", k.Evictions(), k.Len())
	}
	// Small tables have one shard: exact LRU over MaxKeys.
	for _, tc := range []struct{ maxKeys, shards int }{{1, 1}, {511, 1}, {512, 2}, {1024, 4}, {4095, 8}, {1 << 20, 16}} {
		k := rlKeyed(t, RuleConfig{Limit: 1, MaxKeys: tc.maxKeys})
		if len(k.shards) != tc.shards {
			t.Errorf("MaxKeys %d: %d shards, want %d", tc.maxKeys, len(k.shards), tc.shards)
		}
	}
}

// TestKeyedUnderRace hammers a few keys from many goroutines at one
// instant; each key admits exactly its limit.
func TestKeyedUnderRace(t *testing.T) {
	k := rlKeyed(t, RuleConfig{Limit: 100, MaxKeys: 1024, Exceptions: map[string]int{"k3": 7}})
	var counts [8]atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 800 {
				j := (g + i) % 8
				if k.Take(fmt.Sprintf("k%d", j), rlT0, 0).Allowed {
					counts[j].Add(1)
				}
			}
		})
	}
	wg.Wait()
	for j := range counts {
		want := int64(100)
		if j == 3 {
			want = 7
		}
		if got := counts[j].Load(); got != want {
			t.Errorf("k%d admitted %d, want %d", j, got, want)
		}
	}
}

// TestKeyedEvictionUnderRace: more keys than room, from many goroutines;
// memory stays bounded and no key ever gets more than its limit per burst.
func TestKeyedEvictionUnderRace(t *testing.T) {
	k := rlKeyed(t, RuleConfig{Behavior: BehaviorConcurrency, Limit: 2, MaxKeys: 16})
	var wg sync.WaitGroup
	var inFlight [64]atomic.Int64
	for g := range 16 {
		wg.Go(func() {
			for i := range 2000 {
				j := (g*7 + i) % 64
				d := k.Take("key"+strconv.Itoa(j), rlT0, 0)
				if !d.Allowed {
					continue
				}
				if n := inFlight[j].Add(1); n > 2 {
					t.Errorf("key%d: %d in flight, limit 2", j, n)
				}
				inFlight[j].Add(-1)
				d.Release()
			}
		})
	}
	wg.Wait()
	if k.Len() > 16 {
		t.Fatalf("Len %d > MaxKeys 16", k.Len())
	}
}

func BenchmarkKeyed(b *testing.B) {
	k := rlKeyed(b, RuleConfig{Limit: MaxRuleLimit, MaxKeys: 10000})
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "app-" + strconv.Itoa(i)
		k.Take(keys[i], rlT0, 0)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		if !k.Take(keys[i%len(keys)], rlAt(time.Duration(i)*time.Microsecond), 0).Allowed {
			b.Fatal("refused")
		}
	}
}

func BenchmarkKeyedParallel(b *testing.B) {
	k := rlKeyed(b, RuleConfig{Limit: MaxRuleLimit, MaxKeys: 10000})
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "app-" + strconv.Itoa(i)
		k.Take(keys[i], rlT0, 0)
	}
	b.ReportAllocs()
	var seq atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		i := int(seq.Add(1)) * 7919
		for pb.Next() {
			i++
			k.Take(keys[i%len(keys)], rlT0, 0)
		}
	})
}

func BenchmarkKeyedConcurrency(b *testing.B) {
	k := rlKeyed(b, RuleConfig{Behavior: BehaviorConcurrency, Limit: 64, MaxKeys: 10000})
	b.ReportAllocs()
	for b.Loop() {
		d := k.Take("app-1", rlT0, 0)
		d.Release()
	}
}

// BenchmarkKeyedNewKey measures a key not tracked yet in a full table: it
// evicts the least recently used key and reuses its limiter.
func BenchmarkKeyedNewKey(b *testing.B) {
	k := rlKeyed(b, RuleConfig{Limit: 10, MaxKeys: 1000})
	keys := make([]string, 5000)
	for i := range keys {
		keys[i] = "ip-" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		k.Take(keys[i%len(keys)], rlT0, 0)
	}
}
