package natsbackend

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/registry"
)

// SecretLoader reads the secret name of pool: its value and revision, or
// an error wrapping registry.ErrSecretNotFound.
type SecretLoader func(ctx context.Context, pool, name string) ([]byte, uint64, error)

// How a connection to another NATS system is kept.
var (
	// recheckEvery is how often a connection's secret is read again: a
	// changed secret is dialled anew, a deleted one ends the connection.
	recheckEvery = 30 * time.Second
	// retryPause is how long calls fail at once, with the same error,
	// after a dial failed, before one of them dials again.
	retryPause = time.Second
)

// maxDial bounds one dial of another NATS system, within the caller's
// deadline.
const maxDial = 5 * time.Second

// remote is the connection of a worker to the NATS system one secret of
// one pool describes, shared by every API of the pool that names the
// secret (refs). It is dialled on the first call, not when the entry is
// published: an unreachable server fails that API's calls, clearly and
// fast, and nothing else.
type remote struct {
	pool, name string
	load       SecretLoader
	log        *slog.Logger

	cur      atomic.Pointer[remoteConn] // nil: not connected
	checking atomic.Bool                // a recheck is under way

	mu      sync.Mutex
	dialing chan struct{} // closed when the dial under way ends
	failed  time.Time     // when the last dial failed
	failErr error         // and why
	refs    int           // instances holding it; under Adapter.mu
	closed  bool
}

// remoteConn is one dialled connection and the secret revision it used.
type remoteConn struct {
	nc      *nats.Conn
	rev     uint64
	checked atomic.Int64 // unix nanoseconds of the last read of the secret
}

// conn returns the connection to send a call on, dialling when there is
// none. Its errors are the caller's answer.
func (r *remote) conn(ctx context.Context) (*nats.Conn, error) {
	for {
		if c := r.cur.Load(); c != nil {
			if time.Since(time.Unix(0, c.checked.Load())) > recheckEvery && r.checking.CompareAndSwap(false, true) {
				go r.recheck(c)
			}
			if !c.nc.IsConnected() {
				return nil, bus.Errorf(bus.CodeBadGateway, "the backend's NATS server ("+r.label()+") is not connected; reconnecting")
			}
			return c.nc, nil
		}
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			return nil, bus.Errorf(bus.CodeBadGateway, "the backend was replaced; call again")
		}
		if r.failErr != nil && time.Since(r.failed) < retryPause {
			err := r.failErr
			r.mu.Unlock()
			return nil, err
		}
		if ch := r.dialing; ch != nil {
			r.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, callError(ctx.Err())
			}
		}
		ch := make(chan struct{})
		r.dialing = ch
		r.mu.Unlock()

		c, err := r.dial(ctx)
		r.mu.Lock()
		r.dialing = nil
		close(ch)
		switch {
		case err == nil && r.closed:
			c.nc.Close()
			err = bus.Errorf(bus.CodeBadGateway, "the backend was replaced; call again")
		case err == nil:
			r.failErr = nil
			r.cur.Store(c)
		case ctx.Err() == nil:
			// A failure of its own, not the caller's short deadline: the
			// calls of the next moment get it at once.
			r.failed, r.failErr = time.Now(), err
		}
		r.mu.Unlock()
		if err != nil {
			return nil, err
		}
		return c.nc, nil
	}
}

func (r *remote) label() string { return "secret " + r.name + " of pool " + r.pool }

// dial reads the secret and connects with it, within ctx and maxDial.
func (r *remote) dial(ctx context.Context) (*remoteConn, error) {
	ctx, cancel := context.WithTimeout(ctx, maxDial)
	defer cancel()
	val, rev, err := r.load(ctx, r.pool, r.name)
	if errors.Is(err, registry.ErrSecretNotFound) {
		return nil, bus.Errorf(bus.CodeBadGateway, "the backend's NATS server is named by "+r.label()+", which is not stored")
	}
	if err != nil {
		r.log.Warn("reading a nats backend's secret", "pool", r.pool, "secret", r.name, "err", err)
		return nil, bus.Errorf(bus.CodeBusUnavailable, "the "+r.label()+" could not be read")
	}
	s, err := registry.ParseNATSServer(val)
	if err != nil {
		r.log.Warn("a nats backend's secret is not valid", "pool", r.pool, "secret", r.name, "err", err)
		return nil, bus.Errorf(bus.CodeBadGateway, "the "+r.label()+" is not a valid NATS server secret")
	}
	opts, err := r.options(s)
	if err != nil {
		return nil, bus.Errorf(bus.CodeBadGateway, "the "+r.label()+" is not a valid NATS server secret")
	}
	timeout := maxDial
	if d, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(d), time.Millisecond)
	}
	nc, err := nats.Connect(s.URL, append(opts, nats.Timeout(timeout))...)
	if err != nil {
		r.log.Warn("connecting to a nats backend's server", "pool", r.pool, "secret", r.name, "err", err)
		return nil, bus.Errorf(bus.CodeBadGateway, "cannot connect to the backend's NATS server ("+r.label()+"): "+err.Error())
	}
	c := &remoteConn{nc: nc, rev: rev}
	c.checked.Store(time.Now().UnixNano())
	return c, nil
}

// options are the connection options of a secret.
func (r *remote) options(s *registry.NATSServer) ([]nats.Option, error) {
	opts := []nats.Option{
		nats.Name("jetway worker, pool " + r.pool),
		nats.MaxReconnects(-1),
		// No buffering while reconnecting: a call then fails at once
		// instead of waiting out its deadline in a buffer.
		nats.ReconnectBufSize(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				r.log.Warn("nats backend's server disconnected", "pool", r.pool, "secret", r.name, "err", err)
			}
		}),
	}
	switch {
	case s.User != "":
		opts = append(opts, nats.UserInfo(s.User, s.Password))
	case s.Token != "":
		opts = append(opts, nats.Token(s.Token))
	case s.Creds != "":
		userJWT, seed, err := registry.ParseCreds(s.Creds)
		if err != nil {
			return nil, err
		}
		opts = append(opts, nats.UserJWTAndSeed(userJWT, seed))
	}
	if s.CA != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(s.CA)) {
			return nil, errors.New("ca holds no PEM certificate")
		}
		opts = append(opts, nats.Secure(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}))
	}
	return opts, nil
}

// recheck reads the secret of c again: when it changed or is gone, the
// next call dials anew (or fails), and c is closed once the calls on it
// have had their longest deadline.
func (r *remote) recheck(c *remoteConn) {
	defer r.checking.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), maxDial)
	defer cancel()
	_, rev, err := r.load(ctx, r.pool, r.name)
	if err != nil && !errors.Is(err, registry.ErrSecretNotFound) {
		r.log.Warn("reading a nats backend's secret again", "pool", r.pool, "secret", r.name, "err", err)
		return // keep what works while the registry cannot be read
	}
	if err == nil && rev == c.rev {
		c.checked.Store(time.Now().UnixNano())
		return
	}
	if r.cur.CompareAndSwap(c, nil) {
		r.log.Info("a nats backend's secret changed; connecting again", "pool", r.pool, "secret", r.name, "deleted", err != nil)
		time.AfterFunc(registry.MaxTimeout, c.nc.Close)
	}
}

// close ends the connection; no instance holds the remote any more.
func (r *remote) close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	if c := r.cur.Swap(nil); c != nil {
		c.nc.Close()
	}
}

// remote returns the shared connection for the secret name of pool,
// counting the holder; release gives it back.
func (a *Adapter) remote(pool, name string, log *slog.Logger) *remote {
	a.mu.Lock()
	defer a.mu.Unlock()
	key := pool + "\x00" + name
	r := a.remotes[key]
	if r == nil {
		if a.remotes == nil {
			a.remotes = map[string]*remote{}
		}
		r = &remote{pool: pool, name: name, load: a.secrets, log: log}
		a.remotes[key] = r
	}
	r.refs++
	return r
}

func (a *Adapter) release(r *remote) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if r.refs--; r.refs == 0 {
		delete(a.remotes, r.pool+"\x00"+r.name)
		r.close()
	}
}
