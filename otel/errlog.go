package otel

import (
	"log/slog"
	"sync"
	"time"

	gotel "go.opentelemetry.io/otel"
)

// errorLog is the OpenTelemetry error handler Jetway installs: it logs an
// error at most once per period per distinct message, and says how many
// like it were suppressed since the last line. The SDK's default handler
// logs every error: a dead collector gave 20–35 identical lines a second.
type errorLog struct {
	log    *slog.Logger
	period time.Duration
	now    func() time.Time

	mu   sync.Mutex
	seen map[string]*errSeen
}

type errSeen struct {
	last       time.Time
	suppressed int
}

// maxDistinctErrors bounds the memory of errorLog: past it, new messages
// share one entry (and one line per period).
const maxDistinctErrors = 64

func newErrorLog(log *slog.Logger, period time.Duration) *errorLog {
	if log == nil {
		log = slog.Default()
	}
	return &errorLog{log: log, period: period, now: time.Now, seen: map[string]*errSeen{}}
}

// Handle implements otel.ErrorHandler.
func (l *errorLog) Handle(err error) {
	if err == nil {
		return
	}
	msg := err.Error()
	key := msg
	l.mu.Lock()
	st := l.seen[key]
	if st == nil && len(l.seen) >= maxDistinctErrors {
		key = "\x00other"
		st = l.seen[key]
	}
	now := l.now()
	if st != nil && now.Sub(st.last) < l.period {
		st.suppressed++
		l.mu.Unlock()
		return
	}
	if st == nil {
		st = &errSeen{}
		l.seen[key] = st
	}
	suppressed := st.suppressed
	st.last, st.suppressed = now, 0
	l.mu.Unlock()
	if suppressed > 0 {
		l.log.Warn("tracing: "+msg, "suppressed", suppressed, "period", l.period.String())
	} else {
		l.log.Warn("tracing: " + msg)
	}
}

// errorPeriod is how often a given tracing error may be logged.
const errorPeriod = 30 * time.Second

var (
	handlerMu sync.Mutex
	handler   *errorLog
	// lastBatcher is the batcher of the latest SetupTracing, for tests.
	lastBatcher *batcher
)

// installErrorLog makes errors of the OpenTelemetry SDK and of Jetway's
// exporter go to log, rate-limited. The handler is process-wide, as the
// SDK's is.
func installErrorLog(log *slog.Logger, period time.Duration) {
	h := newErrorLog(log, period)
	handlerMu.Lock()
	handler = h
	handlerMu.Unlock()
	gotel.SetErrorHandler(h)
}

// handleError reports an error of the exporter.
func handleError(err error) {
	handlerMu.Lock()
	h := handler
	handlerMu.Unlock()
	if h != nil {
		h.Handle(err)
		return
	}
	gotel.Handle(err)
}
