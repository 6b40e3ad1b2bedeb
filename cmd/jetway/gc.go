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
// second at what it allocated: after a look or two with almost nothing
// (the node is idle; under load it allocates megabytes a second), if at
// least burst bytes were allocated since it last trimmed and at least
// minFree bytes of heap are free, it returns them (debug.FreeOSMemory: a
// collection and a release, once per burst, when nothing else is running).
type trimmer struct {
	every   time.Duration // how often it looks
	idle    int           // looks in a row that must be quiet
	quiet   uint64        // bytes allocated between looks that still count as quiet
	burst   uint64        // bytes allocated since the last trim that make one worth doing
	minFree uint64        // free heap worth returning
	free    func()

	samples   []metrics.Sample
	prev      uint64 // bytes allocated at the last look
	lastTrim  uint64 // … at the last trim
	quietRuns int
}

func newTrimmer() *trimmer {
	return &trimmer{every: time.Second, idle: 2, quiet: 1 << 20, burst: 64 << 20, minFree: 16 << 20, free: debug.FreeOSMemory}
}

// run looks every t.every, for the life of the process.
func (t *trimmer) run() {
	for {
		time.Sleep(t.every)
		t.look()
	}
}

// look reads the allocation and free-heap counters and trims when a burst
// has ended; it reports whether it trimmed.
func (t *trimmer) look() bool {
	if t.samples == nil {
		t.samples = []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/memory/classes/heap/free:bytes"}}
	}
	metrics.Read(t.samples)
	allocs, free := t.samples[0].Value.Uint64(), t.samples[1].Value.Uint64()
	if allocs-t.prev <= t.quiet {
		t.quietRuns++
	} else {
		t.quietRuns = 0
	}
	t.prev = allocs
	if t.quietRuns < t.idle || allocs-t.lastTrim < t.burst || free < t.minFree {
		return false
	}
	t.free()
	t.lastTrim, t.quietRuns = allocs, 0
	return true
}
