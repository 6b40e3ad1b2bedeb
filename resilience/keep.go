package resilience

import (
	"encoding/json"
	"iter"
)

// State that counts (a breaker's history, a limiter's window, a cache's
// entries, a verifier's fetched keys, a backend's connections) must outlive
// a registry change that leaves its own settings alone, and start afresh
// when they change. Kept and KeptMap are that rule, written once: a value
// is kept while the fingerprint of the settings it was built from is the
// same. They are touched only when the registry changes, by one goroutine
// at a time, never on a request's path; they take no lock.

// Fingerprint is how settings are compared: their JSON encoding, so two
// settings are the same exactly when they would be published the same.
func Fingerprint(settings any) string {
	b, _ := json.Marshal(settings)
	return string(b)
}

// Kept holds one value and the fingerprint of the settings it was built
// from. The zero Kept holds nothing.
type Kept[T any] struct {
	val  T
	fp   string
	kept bool // val was built from fp and may be kept
}

// Get returns the value for the settings of fingerprint fp: the one held,
// when it was built from the same settings, else a new one from build,
// which is then held. A build that fails leaves what was held as it was
// (its settings still differ, so the next Get builds again) and Get
// returns that with the error.
func (k *Kept[T]) Get(fp string, build func() (T, error)) (T, error) {
	if k.kept && k.fp == fp {
		return k.val, nil
	}
	v, err := build()
	if err != nil {
		return k.val, err
	}
	k.val, k.fp, k.kept = v, fp, true
	return v, nil
}

// Value is what is held (the zero T if nothing).
func (k *Kept[T]) Value() T { return k.val }

// Clear drops what is held: its settings are gone.
func (k *Kept[T]) Clear() { *k = Kept[T]{} }

// Forget keeps the value held but not its settings, so that the next Get
// builds again whatever its fingerprint: for a value that stands in until
// then (a backend that failed to build and answers with that error).
func (k *Kept[T]) Forget() { k.kept = false }

// KeptMap holds values by key, each kept while its settings are unchanged,
// across rounds: each registry change starts a round (Round) and asks for
// every value it needs (Get); what a round does not ask for is dropped
// with the round before it.
type KeptMap[K comparable, T any] struct {
	prev, cur map[K]*Kept[T]
}

// Round starts a round: the values of the last one may be asked for again.
func (m *KeptMap[K, T]) Round() {
	m.prev, m.cur = m.cur, make(map[K]*Kept[T], len(m.cur))
}

// Get returns the value of key for the settings of fingerprint fp, kept
// from the last round when its settings are the same (see Kept.Get), and
// carries it into this round. A build that fails carries nothing: the zero
// T and the error. Asking for one key twice in a round looks at the last
// round both times.
func (m *KeptMap[K, T]) Get(key K, fp string, build func() (T, error)) (T, error) {
	k := m.prev[key]
	if k == nil {
		k = &Kept[T]{}
	}
	v, err := k.Get(fp, build)
	if err != nil {
		var zero T
		return zero, err
	}
	if m.cur == nil {
		m.cur = map[K]*Kept[T]{}
	}
	m.cur[key] = k
	return v, nil
}

// All is every value of the current round.
func (m *KeptMap[K, T]) All() iter.Seq[T] {
	return func(yield func(T) bool) {
		for _, k := range m.cur {
			if !yield(k.val) {
				return
			}
		}
	}
}
