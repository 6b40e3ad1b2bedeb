package main

import (
	"os"
	"runtime/debug"
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
