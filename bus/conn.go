package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
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
	o := []nats.Option{
		nats.Name(opts.Name),
		nats.Timeout(timeout),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectJitter(100*time.Millisecond, time.Second),
		nats.ReconnectBufSize(-1),
		nats.PingInterval(5 * time.Second),
		nats.MaxPingsOutstanding(3),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("nats reconnected", "url", nc.ConnectedUrlRedacted())
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subj := ""
			if sub != nil {
				subj = sub.Subject
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
