package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// ErrLinkLost ends a request whose connection to NATS was lost (or
// found dead) while it waited for its reply: the request may or may not
// have reached a worker, and its reply, if any, went to a connection that
// is gone.
var ErrLinkLost = errors.New("the connection to nats was lost while the request was in flight")

// Link states, as Link.State reports them.
const (
	LinkUp      = "connected"
	LinkSuspect = "suspect" // the server stopped answering: a reconnect is forced
	LinkDown    = "disconnected"
	LinkClosed  = "closed"
)

// Defaults of LinkOptions and of the client's pings (ConnectOptions).
const (
	DefaultPingInterval  = time.Second
	DefaultMaxPingsOut   = 2
	DefaultQuietForProbe = time.Second
	DefaultProbeTimeout  = 500 * time.Millisecond
	DefaultGrace         = 2 * time.Second
	// maxResends bounds how often one call is sent again.
	maxResends = 2
	// minForcedGap is the least time between two reconnects a probe
	// forces: a server found silent by mistake (a slow uplink holding the
	// ping behind a large body) is not left over and over.
	minForcedGap = 10 * time.Second
)

// LinkOptions tune a Link.
type LinkOptions struct {
	// Quiet: when requests are in flight and nothing at all has come in
	// on the connection for this long, the server is asked for a pong
	// (default DefaultQuietForProbe). Calls that are merely slow do not
	// count: a server that answers the ping is alive.
	Quiet time.Duration
	// ProbeTimeout bounds that pong (default DefaultProbeTimeout): a
	// server silent past it is suspect, and the connection moves to
	// another server of the cluster.
	ProbeTimeout time.Duration
	// Grace is how long after its connection was lost a request waits
	// for the next one (default DefaultGrace): the client moves to
	// another node in milliseconds when there is one. Past it, with no
	// connection, a request fails at once with ErrNotConnected.
	Grace  time.Duration
	Logger *slog.Logger
}

// Link is what a node's call path knows of its connection to NATS: which
// connection requests are on (a generation, ended when the connection is
// lost), whether the server still answers, and how to carry a request
// across a reconnect. The client's own pings find a frozen server within
// PingInterval × (MaxPingsOut + 1); a Link also takes evidence from the
// call path: requests in flight with nothing received for Quiet make it
// ping the server at once, and a server that does not answer within
// ProbeTimeout is left for another.
//
// Pass it in ConnectOptions.Link, so that the connection's events reach
// it, then Start it with the connection.
type Link struct {
	o   LinkOptions
	log *slog.Logger
	nc  atomic.Pointer[nats.Conn]

	mu  sync.Mutex // orders generation changes (never held on the call path)
	gen atomic.Pointer[linkGen]

	state     atomic.Pointer[linkState]
	inflight  atomic.Int64
	busySince atomic.Int64 // unix ns when inflight last went from 0 to 1

	// other, when set (Sites), reports whether another site is up: a
	// request that lost this link, or finds it down, is then handed back
	// at once to be sent there instead of waiting for this link.
	other atomic.Pointer[func() bool]

	// Counted for metrics: calls a lost connection interrupted, the ones
	// sent again on the next, and reconnects a probe forced.
	interrupted, resent, forced atomic.Int64
}

// linkGen is one connection's life: ctx ends, with ErrLinkLost as its
// cause, when the connection is lost; next is closed when the next one
// is up.
type linkGen struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	next   chan struct{}
}

type linkState struct {
	name   string
	reason string
	since  time.Time
}

// NewLink returns a Link in state disconnected, until Start.
func NewLink(o LinkOptions) *Link {
	if o.Quiet <= 0 {
		o.Quiet = DefaultQuietForProbe
	}
	if o.ProbeTimeout <= 0 {
		o.ProbeTimeout = DefaultProbeTimeout
	}
	if o.Grace <= 0 {
		o.Grace = DefaultGrace
	}
	l := &Link{o: o, log: o.Logger}
	if l.log == nil {
		l.log = slog.Default()
	}
	l.gen.Store(newGen())
	l.gen.Load().cancel(ErrLinkLost)
	l.state.Store(&linkState{name: LinkDown, reason: "not connected yet", since: time.Now()})
	return l
}

func newGen() *linkGen {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &linkGen{ctx: ctx, cancel: cancel, next: make(chan struct{})}
}

// Start follows nc (made by Connect with this Link in its options) and
// watches the call path for evidence of a dead server until ctx ends.
func (l *Link) Start(ctx context.Context, nc *nats.Conn) {
	l.nc.Store(nc)
	if nc.IsConnected() {
		l.up()
	}
	go l.watch(ctx, nc)
}

// up starts a new generation: the connection is (again) established.
func (l *Link) up() {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	old := l.gen.Load()
	if old.ctx.Err() == nil { // already up (the first connect, told twice)
		return
	}
	l.gen.Store(newGen())
	close(old.next)
	l.state.Store(&linkState{name: LinkUp, since: time.Now()})
}

// down ends the generation g (nil: the current one) with why: requests on
// it are lost. A generation already ended, or replaced, is left alone.
func (l *Link) down(g *linkGen, name, why string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	cur := l.gen.Load()
	if g != nil && g != cur {
		return
	}
	if cur.ctx.Err() == nil {
		cur.cancel(ErrLinkLost)
	}
	// The disconnect a suspect server's forced reconnect makes keeps the
	// reason it was left for.
	if st := l.state.Load(); st.name != name && st.name != LinkClosed && (st.name != LinkSuspect || name != LinkDown) {
		l.state.Store(&linkState{name: name, reason: why, since: time.Now()})
	}
}

// elsewhere reports whether another site (Sites) can take a request.
func (l *Link) elsewhere() bool {
	f := l.other.Load()
	return f != nil && (*f)()
}

// State says whether requests can be sent now: LinkUp, or another state
// with the reason and since when.
func (l *Link) State() (state, reason string, since time.Time) {
	st := l.state.Load()
	return st.name, st.reason, st.since
}

// Up reports whether the connection is established and not suspect.
func (l *Link) Up() bool { return l.state.Load().name == LinkUp }

// Counts returns the calls a lost connection interrupted, the ones sent
// again on the next connection, and the reconnects forced because the
// server stopped answering.
func (l *Link) Counts() (interrupted, resent, forced int64) {
	return l.interrupted.Load(), l.resent.Load(), l.forced.Load()
}

// Request sends m and waits for its reply until ctx ends, as Request does
// (the wire version's retry included), and carries it across a lost
// connection: when the connection is lost (or found dead) while the
// request waits, a request that may be sent twice (resend: an idempotent
// call) is sent again as soon as the next connection is up, within ctx
// and the Grace; any other fails at once with ErrLinkLost, never at its
// deadline. A request that finds no connection waits for one through the
// Grace, then fails with ErrNotConnected.
func (l *Link) Request(ctx context.Context, m *nats.Msg, sent int, resend bool) (*nats.Msg, error) {
	nc := l.nc.Load()
	resends := 0
	for {
		g := l.gen.Load()
		if g.ctx.Err() != nil { // between connections: wait out the grace
			_, _, since := l.State()
			wait := l.o.Grace - time.Since(since)
			if wait <= 0 || l.elsewhere() {
				return nil, ErrNotConnected
			}
			t := time.NewTimer(wait)
			select {
			case <-g.next:
				t.Stop()
				continue
			case <-t.C:
				return nil, ErrNotConnected
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			}
		}
		rctx, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(g.ctx, cancel)
		if l.inflight.Add(1) == 1 {
			l.busySince.Store(time.Now().UnixNano()) // the quiet is measured from the first call on
		}
		reply, err := Request(rctx, nc, m, sent)
		l.inflight.Add(-1)
		stop()
		cancel()
		if err == nil || ctx.Err() != nil {
			return reply, err
		}
		if notSent(err) {
			// The client knew before its handlers told us; nothing went
			// out, so any call may wait for the next connection.
			l.down(g, LinkDown, err.Error())
			continue
		}
		if errors.Is(err, nats.ErrDisconnected) {
			// The client dropped the requests waiting on a connection it
			// lost, maybe before its handlers told us.
			l.down(g, LinkDown, err.Error())
		}
		if g.ctx.Err() == nil {
			return reply, err
		}
		l.interrupted.Add(1)
		if !resend || resends >= maxResends || l.elsewhere() {
			return nil, ErrLinkLost // the caller may send it elsewhere (Sites)
		}
		resends++
		l.resent.Add(1)
	}
}

// notSent reports whether err is a publish refused because the
// connection is between servers (with no reconnect buffer, a publish then
// fails at once): nothing went out. (ErrDisconnected is not one: it ends
// a request that went out, when the client drops its waiting requests.)
func notSent(err error) bool {
	return errors.Is(err, nats.ErrReconnectBufExceeded) || errors.Is(err, nats.ErrConnectionReconnecting)
}

// Respond sends out as m's reply. When the connection is between servers
// (its server was lost), it waits for the next connection, until
// deadline, and sends it then: the requester's inbox lives on its own
// connection, which may well be up, and a reply late is better than
// none.
func (l *Link) Respond(m *nats.Msg, out *nats.Msg, deadline time.Time) error {
	if l == nil {
		return m.RespondMsg(out)
	}
	g := l.gen.Load() // before the publish: a failure ends this connection's life, not a later one's
	err := m.RespondMsg(out)
	if err == nil || !notSent(err) {
		return err
	}
	l.down(g, LinkDown, err.Error())
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	for {
		select {
		case <-g.next:
		case <-ctx.Done():
			return fmt.Errorf("%w (and no connection came back before the call's deadline)", err)
		}
		g = l.gen.Load()
		if err = m.RespondMsg(out); err == nil || !notSent(err) {
			return err
		}
		l.down(g, LinkDown, err.Error())
	}
}

// watch pings the server at once when requests are in flight and nothing
// has come in for Quiet, and forces a reconnect when it does not answer
// (at most once every minForcedGap). It also mends a generation left
// ended on a connection that is up (a loss reported after the reconnect
// it belonged to).
func (l *Link) watch(ctx context.Context, nc *nats.Conn) {
	tick := time.NewTicker(max(l.o.Quiet/4, 10*time.Millisecond))
	defer tick.Stop()
	var lastIn uint64
	lastChange := time.Now()
	var lastForced time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			if nc.IsClosed() {
				l.down(nil, LinkClosed, "the connection is closed")
				return
			}
			if !nc.IsConnected() {
				lastChange = now
				continue
			}
			if st := l.state.Load(); st.name != LinkUp && st.name != LinkClosed && now.Sub(st.since) > time.Second {
				l.up() // connected for a while: whatever said otherwise is past
			}
			if in := nc.Stats().InMsgs; in != lastIn {
				lastIn, lastChange = in, now
				continue
			}
			if l.inflight.Load() == 0 {
				continue
			}
			from := lastChange
			if busy := time.Unix(0, l.busySince.Load()); busy.After(from) {
				from = busy
			}
			quiet := now.Sub(from)
			if quiet < l.o.Quiet || now.Sub(lastForced) < minForcedGap {
				continue
			}
			g := l.gen.Load()
			if err := nc.FlushTimeout(l.o.ProbeTimeout); err != nil && nc.IsConnected() && g == l.gen.Load() {
				why := fmt.Sprintf("%d calls unanswered for %s and the server did not answer a ping within %s (%v)",
					l.inflight.Load(), quiet.Round(time.Millisecond), l.o.ProbeTimeout, err)
				l.log.Warn("nats server suspect: moving to another", "server", nc.ConnectedUrlRedacted(), "why", why)
				l.down(g, LinkSuspect, why)
				l.forced.Add(1)
				lastForced = time.Now()
				if err := nc.ForceReconnect(); err != nil {
					l.log.Warn("forcing a nats reconnect", "err", err)
				}
			}
			lastChange = time.Now() // alive, or left: either way, start over
		}
	}
}
