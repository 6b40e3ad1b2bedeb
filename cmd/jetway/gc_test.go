package main

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
)

// A node collects at GOGC=200 unless the user chose GOGC.
func TestGCDefault(t *testing.T) {
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)

	t.Setenv("GOGC", "50") // the runtime read it at start; gcDefault must leave it
	gcDefault()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("with GOGC set, gcDefault changed the GC percent to %d", got)
	}
	if err := os.Unsetenv("GOGC"); err != nil {
		t.Fatal(err)
	}
	gcDefault()
	if got := debug.SetGCPercent(100); got != 200 {
		t.Fatalf("with GOGC unset, the GC percent is %d, want 200", got)
	}
}

var (
	sink []byte
	held [][]byte
)

// A node gives back what a burst of allocations left once the burst is
// over — once, not again while it stays idle — and never while it is
// still allocating.
func TestTrimmerReturnsABurstsGarbage(t *testing.T) {
	trims := 0
	tr := &trimmer{idle: 2, quiet: 256 << 10, burst: 32 << 20, minFree: 4 << 20, free: func() { trims++; debug.FreeOSMemory() }}
	tr.look() // the start: what was allocated before is no burst of this test's
	tr.lastTrim = tr.prev
	// A burst: 64 MiB allocated, 16 MiB of it held until the burst ends
	// (as connections hold their buffers while their calls run).
	burst := func() {
		for i := range 64 << 20 / (64 << 10) {
			sink = make([]byte, 64<<10)
			if i%4 == 0 {
				held = append(held, sink)
			}
		}
		sink, held = nil, nil
		runtime.GC()
	}
	burst()
	if tr.look() || trims != 0 {
		t.Fatal("trimmed while allocating")
	}
	for range 2 {
		tr.look()
	}
	if trims != 1 {
		t.Fatalf("after a burst and two quiet looks: %d trims, want 1", trims)
	}
	s := []metrics.Sample{{Name: "/memory/classes/heap/free:bytes"}}
	metrics.Read(s)
	if free := s[0].Value.Uint64(); free >= 4<<20 {
		t.Fatalf("%d bytes of heap still free (kept from the OS) after the trim", free)
	}
	for range 5 {
		tr.look()
	}
	if trims != 1 {
		t.Fatalf("idle after a trim: %d trims, want still 1", trims)
	}
	burst()
	for range 3 {
		tr.look()
	}
	if trims != 2 {
		t.Fatalf("after a second burst: %d trims, want 2", trims)
	}
}
