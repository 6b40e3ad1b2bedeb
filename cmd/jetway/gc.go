package main

import (
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// gcDefault makes a node collect garbage half as often when the user has
// not chosen (GOGC unset): a node's live heap is small and most of what it
// allocates dies with its call, so the default GOGC=100 spends CPU on
// frequent cycles. A GOMEMLIMIT the user sets is still honoured.
func gcDefault() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(200)
	}
}

// trimmer gives the memory a burst of calls left behind back to the OS
// once the burst is over. The runtime keeps freed heap up to its next GC
// goal — at GOGC=200 three times the live heap — and returns the rest
// slowly; after thousands of connections each made a call, that is
// megabytes of garbage a node holds while idle. So a node looks once a
// second at what it allocated. A look with at most quiet bytes (256 KiB)
// is quiet: an idle node's heartbeats and records. One with more than
// light bytes (1 MiB, some sixty calls) is busy; busy looks in a row
// that add up to burst bytes are a burst. A look between the two is light
// traffic, which ends any burst without a trim. When a burst is followed
// by idle quiet looks, at least minFree bytes of heap are spare and the
// last trim is minGap old, it returns them (debug.FreeOSMemory: a
// collection and a release). Steady traffic never trims: light traffic
// sits in the band between, and busy traffic that does not stop is never
// quiet; traffic that stops trims once, and bursts with lulls at most
// once per minGap.
type trimmer struct {
	every   time.Duration // how often it looks
	idle    int           // quiet looks in a row after a burst
	quiet   uint64        // bytes allocated in a look that still count as quiet
	light   uint64        // … as light traffic, neither quiet nor busy
	burst   uint64        // bytes allocated in looks not quiet, in a row, that make a burst
	minFree uint64        // spare heap worth returning (spareHeap)
	minGap  time.Duration // between two trims
	free    func()

	samples   []metrics.Sample
	prev      uint64 // bytes allocated at the last look
	busy      uint64 // bytes allocated in the looks not quiet since the last quiet one
	sawBurst  bool   // since the last trim
	quietRuns int
	lastTrim  time.Time
}

func newTrimmer() *trimmer {
	return &trimmer{every: time.Second, idle: 2, quiet: 256 << 10, light: 1 << 20, burst: 32 << 20, minFree: 16 << 20, minGap: 30 * time.Second, free: debug.FreeOSMemory}
}

// run looks every t.every, for the life of the process.
func (t *trimmer) run() {
	t.samples = []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/free:bytes"}, {Name: "/gc/heap/live:bytes"}}
	metrics.Read(t.samples)
	t.prev = t.samples[0].Value.Uint64()
	for {
		time.Sleep(t.every)
		metrics.Read(t.samples)
		t.look(t.samples[0].Value.Uint64(), spareHeap(t.samples[1].Value.Uint64(), t.samples[2].Value.Uint64(), t.samples[3].Value.Uint64()), time.Now())
	}
}

// spareHeap is the heap a collection and a release could give back: what
// the heap holds (objects, dead ones included until the next collection
// sweeps them, and free pages) less what was live at the last one. A
// burst's garbage stays among the objects until a collection runs, which
// on an idle node is minutes away.
func spareHeap(objects, free, live uint64) uint64 {
	if held := objects + free; held > live {
		return held - live
	}
	return 0
}

// look takes the bytes allocated so far and the spare heap now, and trims
// when a burst has ended; it reports whether it trimmed.
func (t *trimmer) look(allocs, free uint64, now time.Time) bool {
	n := allocs - t.prev
	t.prev = allocs
	switch {
	case n <= t.quiet:
		t.quietRuns, t.busy = t.quietRuns+1, 0
	case n <= t.light: // light traffic: no burst is ending
		t.quietRuns, t.busy, t.sawBurst = 0, 0, false
	default:
		t.quietRuns, t.busy = 0, t.busy+n
		t.sawBurst = t.busy >= t.burst
	}
	if !t.sawBurst || t.quietRuns < t.idle || free < t.minFree || now.Sub(t.lastTrim) < t.minGap {
		return false
	}
	t.free()
	t.sawBurst, t.quietRuns, t.lastTrim = false, 0, now
	return true
}
