package bus

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultURL is where every jetway process looks for NATS unless told
// otherwise (the embedded server of `jetway serve` listens there).
const DefaultURL = "nats://127.0.0.1:4222"

// ConnectOptions tune Connect.
type ConnectOptions struct {
	// Name identifies the connection in NATS monitoring (e.g. "jetway-edge").
	Name string
	// Wait, when true, keeps retrying in the background if the first
	// connect fails instead of returning an error (nodes that can serve from
	// a local snapshot use this).
	Wait bool
	// Logger receives connection state changes. nil means slog.Default().
	Logger *slog.Logger
	// Role, when UserEdge or UserWorker, makes the connection use the
	// role's inbox prefix (InboxPrefix), the only inbox its NATS user may
	// subscribe to; a worker's Pools pick its pool set's prefix.
	Role  string
	Pools []string
	// PingInterval and MaxPingsOut: the client pings its server every
	// PingInterval and leaves it for another when more than MaxPingsOut
	// pings are unanswered, so a frozen server is found within
	// PingInterval × (MaxPingsOut+1). 0 means DefaultPingInterval and
	// DefaultMaxPingsOut (3 s).
	PingInterval time.Duration
	MaxPingsOut  int
	// Link, when set, learns of the connection's losses and reconnects;
	// Start it with the connection Connect returns.
	Link *Link
	// Extra are appended to Jetway's defaults (credentials, TLS, ...).
	Extra []nats.Option
}

// Connect dials NATS with the options every Jetway node wants: reconnect
// forever, and no reconnect buffer, so that a publish during an outage fails
// at once instead of waiting for a reconnect (callers fail fast with a clear
// error rather than hang). ctx bounds the first connect attempt when
// opts.Wait is false.
func Connect(ctx context.Context, url string, opts ConnectOptions) (*nats.Conn, error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	if url == "" {
		url = DefaultURL
	}
	timeout := 2 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		if d := time.Until(dl); d < timeout {
			timeout = max(d, 10*time.Millisecond)
		}
	}
	ping, pings := opts.PingInterval, opts.MaxPingsOut
	if ping <= 0 {
		ping = DefaultPingInterval
	}
	if pings <= 0 {
		pings = DefaultMaxPingsOut
	}
	link := opts.Link
	o := []nats.Option{
		nats.Name(opts.Name),
		nats.Timeout(timeout),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectJitter(100*time.Millisecond, time.Second),
		nats.ReconnectBufSize(-1),
		nats.PingInterval(ping),
		nats.MaxPingsOutstanding(pings),
		// A write the server does not take (a frozen server, its socket
		// full) fails within this, and the client moves on, rather than
		// holding the connection for the default minute.
		nats.FlusherTimeout(2 * time.Second),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			why := "disconnected"
			if err != nil {
				log.Warn("nats disconnected", "err", err)
				why = err.Error()
			}
			link.down(nil, LinkDown, why)
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("nats reconnected", "url", nc.ConnectedUrlRedacted())
			link.up()
		}),
		nats.ConnectHandler(func(*nats.Conn) { link.up() }), // a first connect made in the background (Wait)
		nats.ClosedHandler(func(*nats.Conn) { link.down(nil, LinkClosed, "the connection is closed") }),
		nats.ErrorHandler(func(nc *nats.Conn, sub *nats.Subscription, err error) {
			subj := ""
			if sub != nil {
				subj = sub.Subject
			}
			// A drain ends the connection's JetStream consumers (the
			// registry watches) while their subscriptions close: a
			// consumer gone then is the drain's doing, not a fault.
			if nc != nil && nc.IsDraining() && (errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, nats.ErrConsumerNotFound)) {
				log.Debug("nats async error while draining", "subject", subj, "err", err)
				return
			}
			log.Warn("nats async error", "subject", subj, "err", err)
		}),
	}
	if p := InboxPrefix(opts.Role, opts.Pools...); p != "" {
		o = append(o, nats.CustomInboxPrefix(p))
	}
	if opts.Wait {
		o = append(o, nats.RetryOnFailedConnect(true))
	}
	o = append(o, opts.Extra...)
	nc, err := nats.Connect(url, o...)
	if err != nil {
		return nil, fmt.Errorf("connecting to nats at %s: %w", url, err)
	}
	return nc, nil
}

// ErrNotConnected is returned by callers that need a live connection.
var ErrNotConnected = errors.New("not connected to nats")

// ClientAuth is how a process checks the NATS server and proves itself to
// it, beyond a user and password in the URL: TLS (CA to verify the server
// with, a client certificate and key for mutual TLS) and credentials (a
// .creds file holding a user JWT and its NKey seed, or an NKey seed file).
// Every field is a file name; the zero value adds nothing.
type ClientAuth struct {
	CA, Cert, Key string
	Creds, NKey   string
}

// IsZero reports whether a asks for nothing.
func (a ClientAuth) IsZero() bool { return a == ClientAuth{} }

// Options loads and checks every file a names and returns the options for
// Connect's Extra. A missing or unreadable file, a certificate without its
// key (or the other way round), a key that does not match, a CA file with
// no certificate, or both Creds and NKey, is an error naming the file.
func (a ClientAuth) Options() ([]nats.Option, error) {
	var o []nats.Option
	if a.CA != "" || a.Cert != "" || a.Key != "" {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if a.CA != "" {
			pool, err := LoadCertPool(a.CA)
			if err != nil {
				return nil, fmt.Errorf("nats tls ca: %w", err)
			}
			cfg.RootCAs = pool
		}
		if (a.Cert == "") != (a.Key == "") {
			return nil, errors.New("nats tls: a client certificate and its key come together (--nats-tls-cert with --nats-tls-key)")
		}
		if a.Cert != "" {
			cert, err := tls.LoadX509KeyPair(a.Cert, a.Key)
			if err != nil {
				return nil, fmt.Errorf("nats tls cert %s with key %s: %w", a.Cert, a.Key, err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		o = append(o, nats.Secure(cfg))
	}
	switch {
	case a.Creds != "" && a.NKey != "":
		return nil, errors.New("nats: a .creds file or an NKey seed, not both")
	case a.Creds != "":
		if _, err := os.Stat(a.Creds); err != nil {
			return nil, fmt.Errorf("nats creds: %w", err)
		}
		o = append(o, nats.UserCredentials(a.Creds))
	case a.NKey != "":
		opt, err := nats.NkeyOptionFromSeed(a.NKey)
		if err != nil {
			return nil, fmt.Errorf("nats nkey %s: %w", a.NKey, err)
		}
		o = append(o, opt)
	}
	return o, nil
}

// ServerTLS is the TLS of a NATS listener: its certificate and key and,
// with clientCA, mutual TLS: every client must present a certificate that
// CA signed.
func ServerTLS(cert, key, clientCA string) (*tls.Config, error) {
	c, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return nil, fmt.Errorf("nats listener certificate %s with key %s: %w", cert, key, err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{c}}
	if clientCA != "" {
		pool, err := LoadCertPool(clientCA)
		if err != nil {
			return nil, fmt.Errorf("nats listener client ca: %w", err)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// LoadCertPool reads a PEM bundle of CA certificates: a file that cannot
// be read or holds none is an error naming it.
func LoadCertPool(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s holds no PEM certificate", file)
	}
	return pool, nil
}
