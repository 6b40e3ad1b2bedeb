package otel

import (
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of a LineWriter, as nginx's access_log buffer= and flush=.
const (
	// DefaultLineBuffer bounds the lines held in memory: at ~250 bytes a
	// line, 64 KiB is some 250 calls per write syscall under load.
	DefaultLineBuffer = 64 << 10
	// DefaultLineFlush is how long a line may wait in the buffer when
	// traffic is light: short enough that `tail -f` and log shippers
	// look live, long enough to batch a busy node's lines even before
	// the buffer fills (at most 10 writes a second at low traffic).
	DefaultLineFlush = 100 * time.Millisecond
)

// LineWriter is an io.Writer for a log handler (slog writes each record
// with one Write) that turns a write syscall per line into one per
// buffer: lines are appended to a bounded buffer, and a background
// goroutine writes it out when it is full or every flush interval. Write
// never waits on the output: when the flusher is still writing the
// previous buffer and the current one is full, the line is dropped and
// counted (Dropped), so a slow terminal or pipe never holds up a call.
// Close writes out everything buffered; a Write after Close goes straight
// to the output.
//
// Two buffers take turns: one fills while the other is written out, so
// writers and the output never share bytes and nothing is allocated in
// the steady state.
type LineWriter struct {
	out   io.Writer
	size  int
	every time.Duration

	mu     sync.Mutex
	buf    []byte // filling
	full   []byte // handed to the flusher, waiting to be written
	spare  []byte // the flusher's idle buffer; nil while it writes or holds full
	closed bool

	outMu   sync.Mutex // one write to out at a time, so lines never interleave
	kick    chan struct{}
	done    chan struct{}
	stopped chan struct{}
	dropped atomic.Int64
}

// NewLineWriter starts a LineWriter on out that holds up to size bytes
// (DefaultLineBuffer when size <= 0) and writes them out at least every
// `every` (DefaultLineFlush when every <= 0). Close stops it.
func NewLineWriter(out io.Writer, size int, every time.Duration) *LineWriter {
	if size <= 0 {
		size = DefaultLineBuffer
	}
	if every <= 0 {
		every = DefaultLineFlush
	}
	w := &LineWriter{
		out: out, size: size, every: every,
		buf:     make([]byte, 0, size),
		spare:   make([]byte, 0, size),
		kick:    make(chan struct{}, 1),
		done:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	go w.run()
	return w
}

// Write buffers one line (or drops and counts it, see LineWriter). It
// always reports len(p) written: a dropped access line is no error of the
// call that logged it. A line longer than the whole buffer is written
// straight through, behind what is already buffered.
func (w *LineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	if w.closed || len(p) > w.size {
		w.mu.Unlock()
		if len(p) > w.size {
			w.Flush()
		}
		w.outMu.Lock()
		defer w.outMu.Unlock()
		return w.out.Write(p)
	}
	if len(w.buf)+len(p) > w.size {
		if w.spare == nil { // the flusher is behind: never wait for it
			w.mu.Unlock()
			w.dropped.Add(1)
			return len(p), nil
		}
		w.full, w.buf, w.spare = w.buf, w.spare, nil
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
	w.buf = append(w.buf, p...)
	w.mu.Unlock()
	return len(p), nil
}

// Dropped is the number of lines dropped because the buffer was full.
func (w *LineWriter) Dropped() int64 { return w.dropped.Load() }

// run is the flusher: it writes out a full buffer when kicked, and the
// partly filled one every interval.
func (w *LineWriter) run() {
	defer close(w.stopped)
	t := time.NewTicker(w.every)
	defer t.Stop()
	for {
		all := true
		select {
		case <-w.kick: // just the full buffer: the next lines are only starting to fill the other
			all = false
		case <-t.C:
		case <-w.done:
			return
		}
		w.flush(all)
	}
}

// Flush writes out what is buffered now, in order (a full buffer waiting
// for the flusher, then the filling one), waiting for the output.
func (w *LineWriter) Flush() { w.flush(true) }

// flush writes out the full buffer, and with all the filling one too.
func (w *LineWriter) flush(all bool) {
	w.outMu.Lock()
	defer w.outMu.Unlock()
	for range 2 { // bounded: under load the filling buffer never stays empty
		w.mu.Lock()
		b := w.full
		w.full = nil
		if b == nil && all && len(w.buf) > 0 && w.spare != nil {
			b, w.buf, w.spare = w.buf, w.spare, nil
		}
		w.mu.Unlock()
		if b == nil {
			return
		}
		_, _ = w.out.Write(b) // a log has nowhere to report its own write error
		w.mu.Lock()
		w.spare = b[:0]
		w.mu.Unlock()
	}
}

// Close stops the flusher and writes out every buffered line, in order.
// It is safe to call more than once.
func (w *LineWriter) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	w.mu.Unlock()
	close(w.done)
	<-w.stopped
	w.Flush() // no Write buffers any more
	return nil
}
