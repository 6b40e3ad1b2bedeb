package main

import (
	"os"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
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

// The trimmer gives memory back once after a burst, when the looks since
// are quiet and enough heap is free; never under steady traffic, light or
// heavy, and not twice within its gap.
func TestTrimmerTrimsOnceABurstIsOver(t *testing.T) {
	const mib = 1 << 20
	start := time.Unix(1_000_000, 0)
	newT := func() (*trimmer, *int) {
		trims := 0
		return &trimmer{idle: 2, quiet: 256 << 10, light: mib, burst: 32 * mib, minFree: 16 * mib, minGap: 30 * time.Second, free: func() { trims++ }}, &trims
	}
	// run feeds looks one second apart: bytes allocated in each, and the
	// heap free at each; it returns the trims.
	run := func(tr *trimmer, trims *int, at time.Time, perLook []uint64, free uint64) time.Time {
		for _, n := range perLook {
			at = at.Add(time.Second)
			tr.look(tr.prev+n, free, at)
		}
		return at
	}

	tr, trims := newT()
	at := run(tr, trims, start, []uint64{80 * mib, 0}, 100*mib)
	if *trims != 0 {
		t.Fatal("trimmed after one quiet look")
	}
	at = run(tr, trims, at, []uint64{0}, 100*mib)
	if *trims != 1 {
		t.Fatalf("a burst, then two quiet looks: %d trims, want 1", *trims)
	}
	at = run(tr, trims, at, make([]uint64, 120), 100*mib) // idle for two minutes; a periodic GC refills the free heap
	if *trims != 1 {
		t.Fatalf("idle after a trim: %d trims, want still 1", *trims)
	}
	run(tr, trims, at, []uint64{40 * mib, 0, 0}, 100*mib)
	if *trims != 2 {
		t.Fatalf("a second burst, minutes later: %d trims, want 2", *trims)
	}

	// Bursts with short lulls: once per gap.
	tr, trims = newT()
	at = start
	for range 10 {
		at = run(tr, trims, at, []uint64{40 * mib, 0, 0}, 100*mib)
	}
	if *trims != 1 {
		t.Fatalf("ten bursts within 30 s: %d trims, want 1", *trims)
	}

	// Steady traffic: light (under a burst a look) never; heavy (never
	// quiet) never.
	tr, trims = newT()
	run(tr, trims, start, repeat(900<<10, 600), 200*mib)
	run(tr, trims, start, repeat(50*mib, 600), 200*mib)
	if *trims != 0 {
		t.Fatalf("steady traffic: %d trims", *trims)
	}

	// A burst spread over looks (5,000 connections opened in five
	// seconds) is one; light traffic with a busier second now and then
	// adds up to nothing.
	tr, trims = newT()
	run(tr, trims, start, []uint64{8 * mib, 8 * mib, 8 * mib, 8 * mib, 8 * mib, 0, 0}, 100*mib)
	if *trims != 1 {
		t.Fatalf("a burst over five looks: %d trims, want 1", *trims)
	}
	tr, trims = newT()
	for range 100 {
		run(tr, trims, start, []uint64{900 << 10, 900 << 10, 3 * mib}, 100*mib)
	}
	if *trims != 0 {
		t.Fatalf("light traffic: %d trims", *trims)
	}
	// Traffic around a megabyte a second, whose busier seconds add up to
	// a burst now and then, with a quieter one between: light traffic
	// ends the burst, so no trim follows.
	tr, trims = newT()
	for range 100 {
		run(tr, trims, start, append(repeat(2*mib, 20), 600<<10, 200<<10, 200<<10), 100*mib)
	}
	if *trims != 0 {
		t.Fatalf("traffic around 1 MiB/s: %d trims", *trims)
	}
	// The bounds: 256 KiB is quiet, 1 MiB light.
	tr, trims = newT()
	run(tr, trims, start, []uint64{40 * mib, 256 << 10, 256 << 10}, 100*mib)
	if *trims != 1 {
		t.Fatalf("a burst, then two looks of 256 KiB: %d trims, want 1", *trims)
	}
	tr, trims = newT()
	run(tr, trims, start, []uint64{40 * mib, mib, 0, 0}, 100*mib)
	if *trims != 0 {
		t.Fatalf("a burst, a look of 1 MiB, then quiet: %d trims, want 0", *trims)
	}

	// Little free heap: nothing worth returning.
	tr, trims = newT()
	run(tr, trims, start, []uint64{80 * mib, 0, 0, 0}, 8*mib)
	if *trims != 0 {
		t.Fatalf("8 MiB free: %d trims", *trims)
	}
	// Between a burst and quiet looks, a look neither quiet nor a burst
	// starts the quiet count again.
	tr, trims = newT()
	run(tr, trims, start, []uint64{80 * mib, 0, 4 * mib, 0}, 100*mib)
	if *trims != 0 {
		t.Fatal("trimmed with traffic between the quiet looks")
	}
}

func repeat(n uint64, times int) []uint64 {
	s := make([]uint64, times)
	for i := range s {
		s[i] = n
	}
	return s
}

var (
	sink []byte
	held [][]byte
)

// With the runtime's own counters, a trim gives the free heap back to the
// OS.
func TestTrimmerReturnsABurstsGarbage(t *testing.T) {
	trims := 0
	tr := newTrimmer()
	tr.minGap, tr.minFree = 0, 4<<20
	tr.free = func() { trims++; debug.FreeOSMemory() }
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/free:bytes"}, {Name: "/gc/heap/live:bytes"}}
	read := func() (uint64, uint64) {
		metrics.Read(s)
		return s[0].Value.Uint64(), spareHeap(s[1].Value.Uint64(), s[2].Value.Uint64(), s[3].Value.Uint64())
	}
	debug.FreeOSMemory() // what earlier tests left is neither free nor spare now
	tr.prev, _ = read()
	// No collection during the burst: its garbage is all unswept objects,
	// as on a node whose heap goal the burst did not reach.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	// A burst: 64 MiB allocated, 16 MiB of it held until the burst ends
	// (as connections hold their buffers while their calls run).
	for i := range 64 << 20 / (64 << 10) {
		sink = make([]byte, 64<<10)
		if i%4 == 0 {
			held = append(held, sink)
		}
	}
	sink, held = nil, nil // garbage now, which no collection has swept yet
	f := []metrics.Sample{{Name: "/memory/classes/heap/free:bytes"}}
	metrics.Read(f)
	if _, spare := read(); spare < 4<<20 || f[0].Value.Uint64() >= 4<<20 {
		t.Fatalf("after the burst: %d bytes spare, %d free; want the garbage counted as spare before any collection", spare, f[0].Value.Uint64())
	}
	now := time.Now()
	for i := range 3 {
		a, f := read()
		tr.look(a, f, now.Add(time.Duration(i)*time.Second))
	}
	if trims != 1 {
		t.Fatalf("after a burst and two quiet looks: %d trims, want 1", trims)
	}
	if metrics.Read(f); f[0].Value.Uint64() >= 4<<20 {
		t.Fatalf("%d bytes of heap still free (kept from the OS) after the trim", f[0].Value.Uint64())
	}
}
