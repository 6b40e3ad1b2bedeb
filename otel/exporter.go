package otel

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/jetway-gw/jetway/bus"
)

// ErrExporterConfig is the class of errors in the OTEL_EXPORTER_OTLP_* and
// OTEL_BSP_* settings.
var ErrExporterConfig = errors.New("invalid OTLP trace exporter setting")

// exporterConfig is what the OTLP/HTTP trace exporter reads from the
// environment, the standard OpenTelemetry way: the signal-specific
// OTEL_EXPORTER_OTLP_TRACES_* first, then OTEL_EXPORTER_OTLP_*.
type exporterConfig struct {
	url       string // the full /v1/traces URL
	headers   http.Header
	timeout   time.Duration
	gzip      bool
	tls       *tls.Config   // nil: the default
	batch     int           // spans per export
	queue     int           // spans held at most, the current batch included
	interval  time.Duration // export at least this often (OTEL_BSP_SCHEDULE_DELAY)
	backoffLo time.Duration // after a failed export, drop batches this long, doubling...
	backoffHi time.Duration // ...up to this
}

// Defaults. The SDK's batch processor exports 512 spans at a time from a
// queue of 2048; Jetway makes four spans per call, so a batch is ~250
// calls and at a few thousand calls a second the bigger batch halves the
// number of exports.
const (
	defaultBatch    = 1024
	defaultQueue    = 8192
	defaultInterval = 5 * time.Second
	defaultTimeout  = 10 * time.Second
)

func envFirst(names ...string) (string, string) {
	for _, n := range names {
		if v := strings.TrimSpace(os.Getenv(n)); v != "" {
			return n, v
		}
	}
	return "", ""
}

func envInt(name string, def int) (int, error) {
	v := strings.TrimSpace(os.Getenv(name))
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%w: %s=%q is not a positive integer", ErrExporterConfig, name, v)
	}
	return n, nil
}

// loadExporterConfig reads the exporter's settings from the environment.
func loadExporterConfig() (exporterConfig, error) {
	c := exporterConfig{headers: http.Header{}, backoffLo: time.Second, backoffHi: 30 * time.Second}
	name, u := envFirst("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if u == "" {
		name, u = envFirst("OTEL_EXPORTER_OTLP_ENDPOINT")
		if u != "" {
			// The generic endpoint is a base URL: the signal's path is added.
			u = strings.TrimRight(u, "/") + "/v1/traces"
		}
	}
	if u == "" {
		name, u = "default", "http://localhost:4318/v1/traces"
	}
	pu, err := url.Parse(u)
	if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
		return c, fmt.Errorf("%w: %s=%q is not an http:// or https:// URL", ErrExporterConfig, name, u)
	}
	if pu.Path == "" {
		pu.Path = "/"
	}
	c.url = pu.String()

	for _, n := range []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"} { // specific last: it wins
		v := os.Getenv(n)
		sig := http.Header{}
		for _, kv := range strings.Split(v, ",") {
			if strings.TrimSpace(kv) == "" {
				continue
			}
			k, val, ok := strings.Cut(kv, "=")
			k, val = strings.TrimSpace(k), strings.TrimSpace(val)
			dk, err1 := url.PathUnescape(k)
			dv, err2 := url.PathUnescape(val)
			if !ok || dk == "" || err1 != nil || err2 != nil {
				return c, fmt.Errorf("%w: %s: %q is not key=value (URL-encoded)", ErrExporterConfig, n, kv)
			}
			sig.Add(dk, dv)
		}
		for k, vs := range sig {
			c.headers[k] = vs
		}
	}

	c.timeout = defaultTimeout
	if n, v := envFirst("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"); v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil || ms <= 0 {
			return c, fmt.Errorf("%w: %s=%q is not a positive number of milliseconds", ErrExporterConfig, n, v)
		}
		c.timeout = time.Duration(ms) * time.Millisecond
	}
	switch n, v := envFirst("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "OTEL_EXPORTER_OTLP_COMPRESSION"); strings.ToLower(v) {
	case "", "none":
	case "gzip":
		c.gzip = true
	default:
		return c, fmt.Errorf("%w: %s=%q: only gzip and none are supported", ErrExporterConfig, n, v)
	}
	if n, v := envFirst("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"); v != "" && v != "http/protobuf" {
		return c, fmt.Errorf("%w: %s=%q: Jetway exports http/protobuf only", ErrExporterConfig, n, v)
	}
	if c.tls, err = loadTLS(); err != nil {
		return c, err
	}

	if c.batch, err = envInt("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", defaultBatch); err != nil {
		return c, err
	}
	if c.queue, err = envInt("OTEL_BSP_MAX_QUEUE_SIZE", defaultQueue); err != nil {
		return c, err
	}
	c.batch = min(c.batch, c.queue)
	ms, err := envInt("OTEL_BSP_SCHEDULE_DELAY", int(defaultInterval/time.Millisecond))
	if err != nil {
		return c, err
	}
	c.interval = time.Duration(ms) * time.Millisecond
	return c, nil
}

// loadTLS reads the CA and client certificate files, if any.
func loadTLS() (*tls.Config, error) {
	_, ca := envFirst("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "OTEL_EXPORTER_OTLP_CERTIFICATE")
	_, cert := envFirst("OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE", "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE")
	_, key := envFirst("OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", "OTEL_EXPORTER_OTLP_CLIENT_KEY")
	if ca == "" && cert == "" && key == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pool, err := bus.LoadCertPool(ca)
		if err != nil {
			return nil, fmt.Errorf("%w: the CA certificate: %v", ErrExporterConfig, err)
		}
		cfg.RootCAs = pool
	}
	if (cert == "") != (key == "") {
		return nil, fmt.Errorf("%w: a client certificate needs both CLIENT_CERTIFICATE and CLIENT_KEY", ErrExporterConfig)
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("%w: the client certificate: %v", ErrExporterConfig, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// ExportError is a failed export; its spans are dropped, and so are those
// of the batches that come while the exporter backs off.
type ExportError struct {
	Err error
}

func (e *ExportError) Error() string { return "traces export: " + e.Err.Error() }
func (e *ExportError) Unwrap() error { return e.Err }

// batcher is Jetway's span processor and OTLP/HTTP exporter in one. It
// replaces the SDK's batch span processor, whose queue is a channel read
// by one goroutine: every span's End woke that goroutine (four wake-ups per
// call, each costly on a small VM). Here End appends the span to the
// current batch under a mutex; only a full batch, or the timer, wakes the
// exporting goroutine. When the exporter is busy and the queue holds as
// many spans as allowed, a batch is dropped (and counted), never waited
// for. After a failed export the batcher backs off — 1 s, doubling up to
// 30 s — and drops the batches that come meanwhile without encoding them,
// so a dead collector costs one refused connection per back-off period
// and nothing per call.
type batcher struct {
	cfg    exporterConfig
	client *http.Client

	mu     sync.Mutex
	cur    []sdktrace.ReadOnlySpan
	free   [][]sdktrace.ReadOnlySpan // emptied batches, kept for reuse
	closed bool

	full  chan []sdktrace.ReadOnlySpan
	flush chan chan struct{}
	stop  chan struct{}
	done  chan struct{}

	// exporting goroutine only
	buf     []byte
	zbuf    bytes.Buffer
	zw      *gzip.Writer
	backoff time.Duration
	retryAt time.Time

	exported atomic.Int64 // spans sent
	dropped  atomic.Int64 // spans dropped: queue full, failed export, or backing off
	failures atomic.Int64 // failed exports
}

var _ sdktrace.SpanProcessor = (*batcher)(nil)

func newBatcher(cfg exporterConfig) *batcher {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cfg.tls
	tr.MaxIdleConnsPerHost = 2
	b := &batcher{
		cfg:    cfg,
		client: &http.Client{Transport: tr, Timeout: cfg.timeout},
		cur:    make([]sdktrace.ReadOnlySpan, 0, cfg.batch),
		full:   make(chan []sdktrace.ReadOnlySpan, max(1, cfg.queue/cfg.batch-1)),
		flush:  make(chan chan struct{}),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	go b.run()
	return b
}

// OnStart does nothing: spans are only looked at once ended.
func (b *batcher) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd adds a sampled span to the current batch; a full batch goes to the
// exporting goroutine, or is dropped if the queue is full.
func (b *batcher) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		b.dropped.Add(1)
		return
	}
	b.cur = append(b.cur, s)
	if len(b.cur) >= b.cfg.batch {
		select {
		case b.full <- b.cur:
			b.cur = b.newBatchLocked()
		default:
			b.dropped.Add(int64(len(b.cur)))
			clear(b.cur)
			b.cur = b.cur[:0]
		}
	}
	b.mu.Unlock()
}

func (b *batcher) newBatchLocked() []sdktrace.ReadOnlySpan {
	if n := len(b.free); n > 0 {
		s := b.free[n-1]
		b.free = b.free[:n-1]
		return s
	}
	return make([]sdktrace.ReadOnlySpan, 0, b.cfg.batch)
}

// take returns the current batch (maybe empty) and starts a new one.
func (b *batcher) take() []sdktrace.ReadOnlySpan {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.cur) == 0 {
		return nil
	}
	s := b.cur
	b.cur = b.newBatchLocked()
	return s
}

func (b *batcher) recycle(s []sdktrace.ReadOnlySpan) {
	if cap(s) == 0 {
		return
	}
	clear(s)
	b.mu.Lock()
	if len(b.free) < 2 {
		b.free = append(b.free, s[:0])
	}
	b.mu.Unlock()
}

func (b *batcher) run() {
	defer close(b.done)
	t := time.NewTicker(b.cfg.interval)
	defer t.Stop()
	for {
		select {
		case s := <-b.full:
			b.export(s)
		case <-t.C:
			b.export(b.take())
		case ch := <-b.flush:
			b.drain()
			close(ch)
		case <-b.stop:
			b.drain()
			return
		}
	}
}

// drain exports every queued batch and the current one.
func (b *batcher) drain() {
	for {
		select {
		case s := <-b.full:
			b.export(s)
		default:
			b.export(b.take())
			return
		}
	}
}

// export sends spans, unless the exporter is backing off.
func (b *batcher) export(spans []sdktrace.ReadOnlySpan) {
	if len(spans) == 0 {
		return
	}
	defer b.recycle(spans)
	if now := time.Now(); now.Before(b.retryAt) {
		b.dropped.Add(int64(len(spans)))
		return
	}
	if err := b.post(spans); err != nil {
		b.dropped.Add(int64(len(spans)))
		b.failures.Add(1)
		b.backoff = min(max(2*b.backoff, b.cfg.backoffLo), b.cfg.backoffHi)
		b.retryAt = time.Now().Add(b.backoff)
		handleError(&ExportError{Err: err})
		return
	}
	b.exported.Add(int64(len(spans)))
	b.backoff, b.retryAt = 0, time.Time{}
}

func (b *batcher) post(spans []sdktrace.ReadOnlySpan) error {
	b.buf = appendRequest(b.buf[:0], spans)
	body := b.buf
	if b.cfg.gzip {
		b.zbuf.Reset()
		if b.zw == nil {
			b.zw = gzip.NewWriter(&b.zbuf)
		} else {
			b.zw.Reset(&b.zbuf)
		}
		_, _ = b.zw.Write(body)
		_ = b.zw.Close()
		body = b.zbuf.Bytes()
	}
	if cap(b.buf) > 16<<20 { // an unusual burst: do not keep it
		b.buf = nil
	}
	req, err := http.NewRequest(http.MethodPost, b.cfg.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	for k, vs := range b.cfg.headers {
		req.Header[k] = vs
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("User-Agent", "jetway-otlp")
	if b.cfg.gzip {
		req.Header.Set("Content-Encoding", "gzip")
	}
	resp, err := b.client.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return nil
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	return fmt.Errorf("%s: %s %q", b.cfg.url, resp.Status, bytes.TrimSpace(msg))
}

// ForceFlush exports what is queued.
func (b *batcher) ForceFlush(ctx context.Context) error {
	ch := make(chan struct{})
	select {
	case b.flush <- ch:
	case <-b.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Shutdown exports what is queued and stops; spans ended afterwards are
// dropped.
func (b *batcher) Shutdown(ctx context.Context) error {
	b.mu.Lock()
	already := b.closed
	b.closed = true
	b.mu.Unlock()
	if !already {
		close(b.stop)
	}
	select {
	case <-b.done:
		b.client.CloseIdleConnections()
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stats is what the exporter did: spans sent, spans dropped (queue full,
// failed export, backing off after a failure) and failed exports.
type Stats struct {
	Exported, Dropped, Failures int64
}

func (b *batcher) stats() Stats {
	return Stats{b.exported.Load(), b.dropped.Load(), b.failures.Load()}
}
