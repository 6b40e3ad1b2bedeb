package edge

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/acme"
	"golang.org/x/crypto/acme/autocert"

	"github.com/jetway-gw/jetway/registry"
)

// TLS at the edge. Certs holds the certificates, loaded from files and
// reloaded when the files change; ListenTLS terminates TLS on a listener
// and splits its connections by protocol: HTTP/2 connections go to the
// server as they are (Go's HTTP/2 server frames them, with its defences
// against stream floods), HTTP/1.1 connections are wrapped in the framing
// guard first, above TLS, where the guard sees the requests.

// CertFile is one certificate chain and its private key, PEM files.
type CertFile struct{ Cert, Key string }

// Certs are the edge's certificates. The first is the default; a client
// whose server name (SNI) another one covers gets that one. Safe for
// concurrent use: a handshake reads the current set without a lock.
type Certs struct {
	files []CertFile
	log   *slog.Logger
	cur   atomic.Pointer[[]*tls.Certificate]
	// fromRegistry are the registry's certificates (SetRegistry), by name;
	// they come before the files' for the names they cover.
	fromRegistry atomic.Pointer[[]*tls.Certificate]
	// staples are the OCSP answers (ocsp.go), by served certificate.
	staples sync.Map
	// acme, when set, obtains certificates for the names it allows that no
	// file or registry certificate covers (UseACME).
	acme     *autocert.Manager
	acmeErrs errOnce // ACME failures logged, by name
	ocspErrs errOnce // OCSP failures logged, by certificate names

	mu    sync.Mutex // guards stamp (Reload)
	stamp [][2]fileStamp
}

type fileStamp struct {
	mod  time.Time
	size int64
}

// LoadCerts loads every pair; any that does not load is an error naming
// it. With no pair the edge has no default certificate: a name nothing
// covers (the registry's certificates, ACME) fails its handshake.
func LoadCerts(files []CertFile, log *slog.Logger) (*Certs, error) {
	if log == nil {
		log = slog.Default()
	}
	c := &Certs{files: files, log: log, stamp: make([][2]fileStamp, len(files))}
	set := make([]*tls.Certificate, len(files))
	for i, f := range files {
		cert, st, err := loadPair(f)
		if err != nil {
			return nil, err
		}
		set[i], c.stamp[i] = cert, st
	}
	c.cur.Store(&set)
	return c, nil
}

// loadPair reads one pair and checks that it is usable now: the key
// matches the chain and its leaf is within its validity.
func loadPair(f CertFile) (*tls.Certificate, [2]fileStamp, error) {
	var st [2]fileStamp
	certPEM, err := os.ReadFile(f.Cert)
	if err != nil {
		return nil, st, fmt.Errorf("certificate %s: %w", f.Cert, err)
	}
	keyPEM, err := os.ReadFile(f.Key)
	if err != nil {
		return nil, st, fmt.Errorf("key %s: %w", f.Key, err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, st, fmt.Errorf("certificate %s with key %s: %w", f.Cert, f.Key, err)
	}
	if now := time.Now(); now.After(cert.Leaf.NotAfter) || now.Before(cert.Leaf.NotBefore) {
		return nil, st, fmt.Errorf("certificate %s is valid from %s to %s, not now", f.Cert,
			cert.Leaf.NotBefore.Format(time.RFC3339), cert.Leaf.NotAfter.Format(time.RFC3339))
	}
	for i, name := range []string{f.Cert, f.Key} {
		if fi, err := os.Stat(name); err == nil {
			st[i] = fileStamp{fi.ModTime(), fi.Size()}
		}
	}
	return &cert, st, nil
}

// Reload loads again every pair whose files changed (time or size) since
// they were last loaded. A pair that no longer loads keeps its previous
// certificate, and the error says why; handshakes never see a half-written
// pair, only the old one or the new one.
func (c *Certs) Reload() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	set := *c.cur.Load()
	var next []*tls.Certificate
	var errs []error
	for i, f := range c.files {
		changed := false
		for j, name := range []string{f.Cert, f.Key} {
			fi, err := os.Stat(name)
			if err != nil || fi.ModTime() != c.stamp[i][j].mod || fi.Size() != c.stamp[i][j].size {
				changed = true
			}
		}
		if !changed {
			continue
		}
		cert, st, err := loadPair(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if next == nil {
			next = append([]*tls.Certificate(nil), set...)
		}
		next[i], c.stamp[i] = cert, st
		c.log.Info("certificate reloaded", "cert", f.Cert, "names", cert.Leaf.DNSNames, "not_after", cert.Leaf.NotAfter)
	}
	if next != nil {
		c.cur.Store(&next)
	}
	return errors.Join(errs...)
}

// Watch reloads the certificates every interval until ctx ends; an error
// is logged once per change of the error, not every interval.
func (c *Certs) Watch(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	var logged errOnce
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := c.Reload(); err != nil && logged.changed("", err) {
			c.log.Error("certificate not reloaded; the previous one is still served", "err", err)
		} else if err == nil {
			logged.forget("")
		}
	}
}

// GetCertificate is for tls.Config: a certificate that names the client's
// server name exactly, else one whose wildcard covers it — in each pass
// the registry's before the files' — else the default (the first file's).
func (c *Certs) GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c.acme != nil && len(hello.SupportedProtos) == 1 && hello.SupportedProtos[0] == acme.ALPNProto {
		return c.acme.GetCertificate(hello) // a tls-alpn-01 challenge: that protocol alone, as autocert tells one
	}
	set := *c.cur.Load()
	if name := strings.ToLower(strings.TrimSuffix(hello.ServerName, ".")); name != "" {
		sets := [][]*tls.Certificate{c.registryCerts(), set}
		for _, exact := range []bool{true, false} {
			for _, certs := range sets {
				for _, cert := range certs {
					if covers(cert.Leaf, name, exact) && hello.SupportsCertificate(cert) == nil {
						return c.stapled(cert), nil
					}
				}
			}
		}
		if c.acme != nil && c.acme.HostPolicy(hello.Context(), name) == nil {
			cert, err := c.acme.GetCertificate(hello)
			if err == nil {
				return cert, nil
			}
			if c.acmeErrs.changed(name, err) { // once per change, however often clients ask
				c.log.Warn("no ACME certificate for the name", "name", name, "err", err)
			}
		}
	}
	if len(set) == 0 {
		return nil, fmt.Errorf("no certificate for %q", hello.ServerName)
	}
	return c.stapled(set[0]), nil
}

// UseACME has the edge obtain a certificate (and renew it) for every name
// m's HostPolicy allows that no file or registry certificate covers, and
// answer tls-alpn-01 challenges. Call it before serving.
//
// m.HostPolicy must be set: without one autocert would order a
// certificate for any name a client sends.
func (c *Certs) UseACME(m *autocert.Manager) {
	if m.HostPolicy == nil {
		panic("edge: UseACME with a Manager without HostPolicy would order certificates for any name")
	}
	c.acme = m
}

// errOnce tells, per key, whether an error differs from the last one
// logged, so that a failure is logged when it starts or changes, not at
// every handshake or pass.
type errOnce struct {
	mu   sync.Mutex
	last map[string]string
}

// forget clears key's error: the next one is logged again.
func (e *errOnce) forget(key string) {
	e.mu.Lock()
	delete(e.last, key)
	e.mu.Unlock()
}

func (e *errOnce) changed(key string, err error) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.last == nil {
		e.last = map[string]string{}
	}
	msg := err.Error()
	if e.last[key] == msg {
		return false
	}
	if len(e.last) > 1024 { // bounded whatever names clients send
		clear(e.last)
	}
	e.last[key] = msg
	return true
}

// covers reports whether a leaf names host exactly, or (not exact) covers
// it with a wildcard.
func covers(leaf *x509.Certificate, host string, exact bool) bool {
	if exact {
		for _, n := range leaf.DNSNames {
			if strings.EqualFold(n, host) {
				return true
			}
		}
		return false
	}
	return leaf.VerifyHostname(host) == nil
}

func (c *Certs) registryCerts() []*tls.Certificate {
	if p := c.fromRegistry.Load(); p != nil {
		return *p
	}
	return nil
}

// SetRegistry serves the registry's certificates (Snapshot.Certs, parsed
// and checked by the watcher) from the next handshake on; open connections
// keep theirs. Edge.Apply calls it with every snapshot.
func (c *Certs) SetRegistry(certs map[string]*registry.Cert) {
	names := slices.Sorted(maps.Keys(certs))
	set := make([]*tls.Certificate, 0, len(names))
	for _, n := range names {
		if t := certs[n].TLS; t != nil {
			set = append(set, t)
		}
	}
	c.fromRegistry.Store(&set)
}

// TLSConfig is the edge's TLS: 1.2 or later, forward-secret AEAD suites
// only (TLS 1.3 chooses its own), HTTP/2 offered before HTTP/1.1.
func (c *Certs) TLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: c.GetCertificate,
		NextProtos:     c.nextProtos(),
		CipherSuites: []uint16{
			tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
			tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
			tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
		},
	}
}

func (c *Certs) nextProtos() []string {
	if c.acme != nil {
		return []string{"h2", "http/1.1", acme.ALPNProto}
	}
	return []string{"h2", "http/1.1"}
}

// TLSListeners are the two sides of a TLS listener: HTTP1 yields
// connections that chose HTTP/1.1 (or nothing) by ALPN, guarded against
// ambiguous framing; HTTP2 those that chose h2, as *tls.Conn, for the
// server's HTTP/2. Serve both with the same http.Server. Closing either
// closes the listener.
type TLSListeners struct {
	raw              net.Listener
	cfg              *tls.Config
	handshakeTimeout time.Duration
	maxHeaderBytes   int
	h1, h2           chan net.Conn
	done             chan struct{}
	closeOnce        sync.Once
	err              atomic.Pointer[error]
}

// ListenTLS terminates TLS on raw. Each handshake runs on its own
// goroutine within handshakeTimeout (a client that never finishes one
// holds only its own connection, bounded by raw's connection limit).
func ListenTLS(raw net.Listener, cfg *tls.Config, handshakeTimeout time.Duration, maxHeaderBytes int) *TLSListeners {
	if handshakeTimeout <= 0 {
		handshakeTimeout = 10 * time.Second
	}
	if maxHeaderBytes <= 0 {
		maxHeaderBytes = 1 << 20
	}
	l := &TLSListeners{raw: raw, cfg: cfg, handshakeTimeout: handshakeTimeout, maxHeaderBytes: maxHeaderBytes + 4096,
		h1: make(chan net.Conn), h2: make(chan net.Conn), done: make(chan struct{})}
	go l.accept()
	return l
}

// accept takes connections until the listener closes. A temporary error
// (out of file descriptors, say) is retried after a pause that doubles
// from 5 ms to 1 s, as http.Server does: the edge must outlive a burst.
func (l *TLSListeners) accept() {
	var pause time.Duration
	for {
		c, err := l.raw.Accept()
		if err != nil {
			var ne interface{ Temporary() bool }
			if errors.As(err, &ne) && ne.Temporary() && !errors.Is(err, net.ErrClosed) {
				pause = min(max(2*pause, 5*time.Millisecond), time.Second)
				select {
				case <-time.After(pause):
					continue
				case <-l.done:
					return
				}
			}
			l.err.Store(&err)
			_ = l.close()
			return
		}
		pause = 0
		go l.handshake(c)
	}
}

func (l *TLSListeners) handshake(c net.Conn) {
	tc := tls.Server(c, l.cfg)
	ctx, cancel := context.WithTimeout(context.Background(), l.handshakeTimeout)
	err := tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		_ = c.Close()
		return
	}
	st := tc.ConnectionState()
	if st.NegotiatedProtocol == acme.ALPNProto {
		_ = c.Close() // an ACME validator: the handshake was all it wanted
		return
	}
	var out net.Conn = tc
	ch := l.h2
	if st.NegotiatedProtocol != "h2" {
		out, ch = &framingConn{Conn: tc, max: l.maxHeaderBytes, tls: &st}, l.h1
	}
	select {
	case ch <- out:
	case <-l.done:
		_ = c.Close()
	}
}

func (l *TLSListeners) close() error {
	var err error
	l.closeOnce.Do(func() {
		close(l.done)
		err = l.raw.Close()
	})
	return err
}

// HTTP1 is the listener of the HTTP/1.1 connections.
func (l *TLSListeners) HTTP1() net.Listener { return tlsSide{l, l.h1} }

// HTTP2 is the listener of the HTTP/2 connections.
func (l *TLSListeners) HTTP2() net.Listener { return tlsSide{l, l.h2} }

type tlsSide struct {
	l  *TLSListeners
	ch chan net.Conn
}

func (s tlsSide) Accept() (net.Conn, error) {
	select {
	case c := <-s.ch:
		return c, nil
	case <-s.l.done:
		if p := s.l.err.Load(); p != nil {
			return nil, *p
		}
		return nil, net.ErrClosed
	}
}

func (s tlsSide) Close() error   { return s.l.close() }
func (s tlsSide) Addr() net.Addr { return s.l.raw.Addr() }
