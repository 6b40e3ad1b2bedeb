package workers

import "sync/atomic"

// recentCalls remembers which channel served each of an API's recent
// calls on this worker, and for which app, so that a late outcome report
// (edge/outcomes.go) counts only for a call this worker really made on
// that channel for that app, and only once. It is a fixed table indexed
// by a hash of the call's id: a newer call overwrites an older one in
// its slot, so a report that comes after about len(slots) more calls of
// the API is ignored. No lock, no allocation per call.
type recentCalls struct {
	slots [recentCallSlots]struct {
		id   atomic.Uint64 // the call id's hash; 0: empty or claimed
		meta atomic.Uint64 // the app's hash << 16 | the channel's index + 1
	}
}

// recentCallSlots is the table's size (16 bytes each).
const recentCallSlots = 1 << 14

func hash64(s string) uint64 {
	h := uint64(14695981039346656037) // FNV-1a
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h | 1 // never 0, the empty slot's
}

func callMeta(app string, channel int) uint64 {
	return hash64(app)<<16 | uint64(channel+1)&0xffff
}

// add remembers that call id was served by channel for app.
func (r *recentCalls) add(id, app string, channel int) {
	h := hash64(id)
	s := &r.slots[h%recentCallSlots]
	s.id.Store(0) // no reader matches a slot half written
	s.meta.Store(callMeta(app, channel))
	s.id.Store(h)
}

// claim reports whether call id was served by channel for app and was
// not claimed before; it claims it.
func (r *recentCalls) claim(id, app string, channel int) bool {
	h := hash64(id)
	s := &r.slots[h%recentCallSlots]
	return s.id.Load() == h && s.meta.Load() == callMeta(app, channel) && s.id.CompareAndSwap(h, 0)
}
