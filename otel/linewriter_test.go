package otel

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is an output that records each Write, safe to read while the
// flusher writes.
type syncBuffer struct {
	mu     sync.Mutex
	b      bytes.Buffer
	writes int
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) Writes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes
}

// eventually polls cond for up to 5 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// line is a 30-byte line numbered i.
func line(i int) []byte { return fmt.Appendf(nil, "line %024d\n", i) }

func TestLineWriterFlushesWhenFull(t *testing.T) {
	out := &syncBuffer{}
	w := NewLineWriter(out, 100, time.Hour) // the timer never fires in this test
	defer func() { _ = w.Close() }()
	for i := range 3 {
		_, _ = w.Write(line(i))
	}
	time.Sleep(20 * time.Millisecond)
	if out.Writes() != 0 {
		t.Fatalf("90 of 100 bytes were written out before the buffer was full: %q", out.String())
	}
	_, _ = w.Write(line(3)) // does not fit: the first three go out in one write
	eventually(t, "the full buffer written out", func() bool { return out.Writes() == 1 })
	if want := string(line(0)) + string(line(1)) + string(line(2)); out.String() != want {
		t.Fatalf("written %q, want %q", out.String(), want)
	}
}

func TestLineWriterFlushesOnTime(t *testing.T) {
	out := &syncBuffer{}
	w := NewLineWriter(out, 64<<10, 20*time.Millisecond)
	defer func() { _ = w.Close() }()
	_, _ = w.Write(line(1))
	_, _ = w.Write(line(2))
	eventually(t, "lines written out by the timer", func() bool { return out.String() == string(line(1))+string(line(2)) })
	if out.Writes() != 1 {
		t.Fatalf("%d writes for two lines, want one", out.Writes())
	}
}

// gate is an output whose Write blocks until released, as a stalled pipe.
type gate struct {
	syncBuffer
	entered chan struct{}
	release chan struct{}
}

func (g *gate) Write(p []byte) (int, error) {
	g.entered <- struct{}{}
	<-g.release
	return g.syncBuffer.Write(p)
}

func TestLineWriterDropsAndCountsWhenBehind(t *testing.T) {
	g := &gate{entered: make(chan struct{}, 10), release: make(chan struct{})}
	w := NewLineWriter(g, 100, time.Hour)
	for i := range 4 { // the 4th hands lines 0-2 to the flusher, which stalls on them
		_, _ = w.Write(line(i))
	}
	<-g.entered
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 4; i < 7; i++ { // 4 and 5 fill the buffer with 3; 6 finds it full
			if n, err := w.Write(line(i)); n != 30 || err != nil {
				t.Errorf("Write = %d, %v", n, err)
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Write blocked on a stalled output")
	}
	if d := w.Dropped(); d != 1 {
		t.Fatalf("Dropped = %d, want 1", d)
	}
	close(g.release)
	_ = w.Close()
	var want strings.Builder
	for i := range 6 {
		want.Write(line(i))
	}
	if got := g.String(); got != want.String() {
		t.Fatalf("written %q, want lines 0-5 in order, %q", got, want.String())
	}
}

func TestLineWriterCloseWritesEverything(t *testing.T) {
	out := &syncBuffer{}
	w := NewLineWriter(out, 1000, time.Hour)
	var want strings.Builder
	for i := range 100 { // 3000 bytes: several buffers' worth, the last one partial
		_, _ = w.Write(line(i))
		want.Write(line(i))
		if i%20 == 0 {
			// let the flusher catch up: this test is about Close, not drops
			eventually(t, "flusher idle", func() bool { w.mu.Lock(); defer w.mu.Unlock(); return w.full == nil })
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if out.String() != want.String() {
		t.Fatalf("after Close, written %d bytes, want %d", len(out.String()), want.Len())
	}
	if w.Dropped() != 0 {
		t.Fatalf("Dropped = %d", w.Dropped())
	}
	// After Close a line goes straight through; Close again is harmless.
	_, _ = w.Write(line(100))
	_ = w.Close()
	if !strings.HasSuffix(out.String(), string(line(100))) {
		t.Fatal("a line written after Close was lost")
	}
}

func TestLineWriterLongLineGoesThrough(t *testing.T) {
	out := &syncBuffer{}
	w := NewLineWriter(out, 100, time.Hour)
	defer func() { _ = w.Close() }()
	_, _ = w.Write(line(0))
	long := append(bytes.Repeat([]byte("x"), 500), '\n')
	_, _ = w.Write(long)
	if want := string(line(0)) + string(long); out.String() != want {
		t.Fatalf("written %q, want the buffered line then the long one", out.String())
	}
}

// TestLineWriterConcurrentSlog has many goroutines log through slog into
// one small buffer: every line that is not counted as dropped comes out
// whole, and none is lost at Close.
func TestLineWriterConcurrentSlog(t *testing.T) {
	out := &syncBuffer{}
	w := NewLineWriter(out, 4096, time.Millisecond)
	l := slog.New(slog.NewJSONHandler(w, nil))
	const goroutines, each = 8, 2000
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				l.Info("access", "g", g, "i", i, "path", "/some/path")
			}
		})
	}
	wg.Wait()
	_ = w.Close()
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	for _, ln := range lines {
		if !strings.HasPrefix(ln, `{"time":`) || !strings.HasSuffix(ln, `"path":"/some/path"}`) {
			t.Fatalf("a torn line: %q", ln)
		}
	}
	if got, want := int64(len(lines))+w.Dropped(), int64(goroutines*each); got != want {
		t.Fatalf("%d lines written + %d dropped, want %d", len(lines), w.Dropped(), want)
	}
}

func TestMetricsAccessLogDropped(t *testing.T) {
	m := NewMetrics("n1", "edge")
	var b bytes.Buffer
	_ = m.WritePrometheus(&b)
	if strings.Contains(b.String(), "jetway_access_log_dropped_total") {
		t.Fatal("drops reported without an access log")
	}
	m.CountAccessLogDrops(func() int64 { return 7 })
	b.Reset()
	_ = m.WritePrometheus(&b)
	if want := `jetway_access_log_dropped_total{node="n1",role="edge"} 7`; !strings.Contains(b.String(), want) {
		t.Fatalf("/metrics without %s:\n%s", want, b.String())
	}
}
