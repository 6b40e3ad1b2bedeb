package natstest

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy is a TCP proxy in front of a NATS server that can make the
// server look frozen or gone to the clients behind it, while the server
// itself runs on for everyone else:
//
//   - Freeze: nothing passes either way and nothing is closed, as with a
//     process stopped by SIGSTOP (its kernel even completes new TCP
//     handshakes, which then hear nothing);
//   - Cut: every connection is closed and new ones are refused, as with a
//     process killed;
//   - Thaw and Restore undo them.
type Proxy struct {
	ln     net.Listener
	to     string
	frozen atomic.Bool
	down   atomic.Bool
	mu     sync.Mutex
	thaw   chan struct{}
	conns  []net.Conn
}

// NewProxy listens on a free loopback port and forwards to upstream
// (host:port); t.Cleanup closes it and its connections.
func NewProxy(t testing.TB, upstream string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, to: upstream, thaw: make(chan struct{})}
	t.Cleanup(func() {
		_ = ln.Close()
		p.closeAll()
		p.Thaw()
	})
	go p.accept()
	return p
}

// URL is the nats:// URL clients use to reach the server through p.
func (p *Proxy) URL() string { return "nats://" + p.ln.Addr().String() }

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.down.Load() {
			_ = c.Close()
			continue
		}
		if p.frozen.Load() {
			p.keep(c) // accepted, and silent
			continue
		}
		u, err := net.Dial("tcp", p.to)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.keep(c, u)
		go p.pipe(c, u)
		go p.pipe(u, c)
	}
}

func (p *Proxy) keep(cs ...net.Conn) {
	p.mu.Lock()
	p.conns = append(p.conns, cs...)
	p.mu.Unlock()
}

func (p *Proxy) closeAll() {
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
}

func (p *Proxy) pipe(from, to net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if p.frozen.Load() {
			p.mu.Lock()
			thaw := p.thaw
			p.mu.Unlock()
			<-thaw // held, as a frozen process holds what it has not read
		}
		if n > 0 {
			if _, werr := to.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				_ = to.Close()
			}
			return
		}
	}
}

// Freeze makes the server silent to the clients behind p.
func (p *Proxy) Freeze() { p.frozen.Store(true) }

// Thaw ends a Freeze: what was held passes on (to connections their
// clients may have left meanwhile), new connections pass again.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen.Swap(false) {
		close(p.thaw)
		p.thaw = make(chan struct{})
	}
}

// Cut closes every connection through p and refuses new ones until
// Restore.
func (p *Proxy) Cut() {
	p.down.Store(true)
	p.closeAll()
}

// Restore ends a Cut.
func (p *Proxy) Restore() { p.down.Store(false) }
