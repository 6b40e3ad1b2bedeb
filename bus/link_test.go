package bus_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/bus/natstest"
)

// holdingResponder answers every request on subject from its own
// connection, but holds the first one until release is closed.
func holdingResponder(t *testing.T, url, subject string) (first chan struct{}, release chan struct{}, seen *atomic.Int64) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	first, release, seen = make(chan struct{}), make(chan struct{}), new(atomic.Int64)
	_, err = nc.QueueSubscribe(subject, "q", func(m *nats.Msg) {
		if seen.Add(1) == 1 {
			close(first)
			<-release
		}
		_ = m.Respond([]byte("ok:" + string(m.Data)))
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return first, release, seen
}

func linked(t *testing.T, urls string, lo bus.LinkOptions) (*nats.Conn, *bus.Link) {
	t.Helper()
	l := bus.NewLink(lo)
	nc, err := bus.Connect(context.Background(), urls, bus.ConnectOptions{Name: "link-test", Link: l, Extra: []nats.Option{nats.DontRandomize()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	l.Start(ctx, nc)
	return nc, l
}

// waitInterest waits until a request on subject from nc is answered
// (the responder's interest has reached nc's server).
func waitInterest(t *testing.T, l *bus.Link, subject string) {
	t.Helper()
	natstest.CheckFor(t, 5*time.Second, 20*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_, err := l.Request(ctx, &nats.Msg{Subject: subject, Data: []byte("warm")}, bus.WireVersion, false)
		return err
	})
}

// A server that stops answering, connection open, is found from the call
// path within about Quiet + ProbeTimeout, not the client's pings: the
// idempotent request in flight is sent again on the next server and
// answered; the other fails at once with ErrLinkLost, not at its
// deadline.
func TestLinkCarriesCallsOffAFrozenServer(t *testing.T) {
	servers, _ := natstest.RunCluster(t, 2, nil)
	fz := natstest.NewProxy(t, servers[0].Addr().String())
	first, release, seen := holdingResponder(t, servers[1].ClientURL(), "svc.frozen")
	_, l := linked(t, fz.URL()+","+servers[1].ClientURL(), bus.LinkOptions{Quiet: 300 * time.Millisecond, ProbeTimeout: 200 * time.Millisecond})
	seen.Store(-1) // the warm-up's answer is not held
	waitInterest(t, l, "svc.frozen")
	seen.Store(0)

	type result struct {
		reply *nats.Msg
		err   error
		took  time.Duration
	}
	call := func(resend bool) chan result {
		ch := make(chan result, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			start := time.Now()
			m, err := l.Request(ctx, &nats.Msg{Subject: "svc.frozen", Data: []byte("x")}, bus.WireVersion, resend)
			ch <- result{m, err, time.Since(start)}
		}()
		return ch
	}
	idem := call(true)
	<-first // held by the responder: in flight
	other := call(false)
	time.Sleep(50 * time.Millisecond) // the second is sent, and waits behind the first
	fz.Freeze()
	start := time.Now()
	close(release) // its answer goes to the frozen server: held there

	r := <-idem
	if r.err != nil {
		t.Fatalf("the idempotent call failed: %v", r.err)
	}
	if string(r.reply.Data) != "ok:x" {
		t.Fatalf("reply %q", r.reply.Data)
	}
	t.Logf("idempotent call answered %s after the freeze", time.Since(start).Round(time.Millisecond))
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the idempotent call took %s after the freeze: the frozen server was not left early", d)
	}
	o := <-other
	if !errors.Is(o.err, bus.ErrLinkLost) {
		t.Fatalf("the other call: %v (reply %v after %s), want ErrLinkLost", o.err, o.reply, o.took)
	}
	if o.took > 5*time.Second {
		t.Fatalf("the other call failed after %s: it waited for its deadline", o.took)
	}
	interrupted, resent, forced := l.Counts()
	if interrupted < 2 || resent < 1 || forced != 1 {
		t.Fatalf("counts: interrupted %d, resent %d, forced %d", interrupted, resent, forced)
	}
	natstest.CheckFor(t, 5*time.Second, 20*time.Millisecond, func() error {
		if st, why, _ := l.State(); st != bus.LinkUp {
			return errors.New(st + ": " + why)
		}
		return nil
	})
}

// A killed server: the calls in flight on it are carried to the next.
func TestLinkCarriesCallsOffAKilledServer(t *testing.T) {
	servers, _ := natstest.RunCluster(t, 2, nil)
	first, release, seen := holdingResponder(t, servers[1].ClientURL(), "svc.killed")
	nc, l := linked(t, servers[0].ClientURL()+","+servers[1].ClientURL(), bus.LinkOptions{})
	seen.Store(-1)
	waitInterest(t, l, "svc.killed")
	seen.Store(0)

	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := l.Request(ctx, &nats.Msg{Subject: "svc.killed", Data: []byte("x")}, bus.WireVersion, true)
		done <- err
	}()
	<-first
	start := time.Now()
	servers[0].Shutdown()
	natstest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if nc.Stats().Reconnects == 0 {
			return errors.New("not reconnected yet")
		}
		return nil
	})
	close(release) // its answer goes to the dead server's client: lost
	if err := <-done; err != nil {
		t.Fatalf("the call failed: %v", err)
	}
	t.Logf("answered %s after the kill", time.Since(start).Round(time.Millisecond))
	if _, resent, _ := l.Counts(); resent != 1 {
		t.Fatalf("resent %d, want 1", resent)
	}
}

// A worker whose connection drops between taking a request and answering
// it sends the answer once it is connected again, within the deadline:
// the caller, on its own connection, gets it.
func TestLinkRespondAcrossAReconnect(t *testing.T) {
	ns := natstest.RunServer(t)
	fz := natstest.NewProxy(t, ns.Addr().String())
	wnc, wl := linked(t, fz.URL(), bus.LinkOptions{})
	got := make(chan *nats.Msg, 1)
	if _, err := wnc.QueueSubscribe("svc.reply", "q", func(m *nats.Msg) { got <- m }); err != nil {
		t.Fatal(err)
	}
	if err := wnc.Flush(); err != nil {
		t.Fatal(err)
	}
	caller := natstest.Connect(t, ns)
	done := make(chan error, 1)
	go func() {
		m, err := caller.Request("svc.reply", []byte("x"), 10*time.Second)
		if err == nil && string(m.Data) != "late" {
			err = errors.New("reply " + string(m.Data))
		}
		done <- err
	}()
	var m *nats.Msg
	select {
	case m = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the request never reached the worker")
	}
	fz.Cut()
	natstest.CheckFor(t, 5*time.Second, 5*time.Millisecond, func() error {
		if wnc.IsConnected() {
			return errors.New("still connected")
		}
		return nil
	})
	time.AfterFunc(500*time.Millisecond, fz.Restore)
	start := time.Now()
	if err := wl.Respond(m, &nats.Msg{Data: []byte("late")}, time.Now().Add(8*time.Second)); err != nil {
		t.Fatalf("respond: %v", err)
	}
	if time.Since(start) < 400*time.Millisecond {
		t.Fatal("the answer went out while the connection was down: the retry was not tested")
	}
	if err := <-done; err != nil {
		t.Fatalf("the caller: %v", err)
	}
}

// Slow answers are not evidence: with calls waiting past Quiet on a
// server that answers its pings, the connection stays.
func TestLinkKeepsALiveServerWithSlowCalls(t *testing.T) {
	ns := natstest.RunServer(t)
	rnc := natstest.Connect(t, ns)
	if _, err := rnc.Subscribe("svc.slow", func(m *nats.Msg) {
		time.Sleep(time.Second)
		_ = m.Respond([]byte("slow"))
	}); err != nil {
		t.Fatal(err)
	}
	if err := rnc.Flush(); err != nil {
		t.Fatal(err)
	}
	_, l := linked(t, ns.ClientURL(), bus.LinkOptions{Quiet: 100 * time.Millisecond, ProbeTimeout: 100 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := l.Request(ctx, &nats.Msg{Subject: "svc.slow"}, bus.WireVersion, false); err != nil {
		t.Fatalf("the slow call: %v", err)
	}
	if interrupted, _, forced := l.Counts(); interrupted != 0 || forced != 0 {
		t.Fatalf("interrupted %d, forced %d: a live server was left", interrupted, forced)
	}
}

// slowUplink forwards client→server at about bps bytes a second (and the
// other way at full speed).
func slowUplink(t *testing.T, upstream string, bps int) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", upstream)
			if err != nil {
				_ = c.Close()
				continue
			}
			t.Cleanup(func() { _ = c.Close(); _ = s.Close() })
			go func() { _, _ = io.Copy(c, s); _ = c.Close() }()
			go func() {
				buf := make([]byte, bps/20)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						if _, werr := s.Write(buf[:n]); werr != nil {
							break
						}
						time.Sleep(50 * time.Millisecond)
					}
					if err != nil {
						break
					}
				}
				_ = s.Close()
			}()
		}
	}()
	return "nats://" + ln.Addr().String()
}

// A large body on a slow uplink keeps the server's answers (the ping's
// pong included) behind it for seconds: the link may take that for a
// silent server once, but not over and over — the call is answered
// within its deadline.
func TestLinkSlowUplinkIsNotLeftOverAndOver(t *testing.T) {
	ns := natstest.RunServer(t)
	rnc := natstest.Connect(t, ns)
	if _, err := rnc.Subscribe("svc.up", func(m *nats.Msg) { _ = m.Respond([]byte("ok")) }); err != nil {
		t.Fatal(err)
	}
	if err := rnc.Flush(); err != nil {
		t.Fatal(err)
	}
	_, l := linked(t, slowUplink(t, ns.Addr().String(), 256<<10), bus.LinkOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	_, err := l.Request(ctx, &nats.Msg{Subject: "svc.up", Data: make([]byte, 512<<10)}, bus.WireVersion, true)
	interrupted, resent, forced := l.Counts()
	t.Logf("answered in %s: interrupted %d, resent %d, forced %d", time.Since(start).Round(time.Millisecond), interrupted, resent, forced)
	if err != nil {
		t.Fatalf("the call: %v", err)
	}
	if forced > 1 {
		t.Fatalf("%d forced reconnects for one slow call", forced)
	}
}

// Answers racing reconnects never leave the link down on a connection
// that is up.
func TestLinkRespondDuringReconnectsEndsUp(t *testing.T) {
	ns := natstest.RunServer(t)
	wnc, wl := linked(t, ns.ClientURL(), bus.LinkOptions{})
	caller := natstest.Connect(t, ns)
	if _, err := wnc.Subscribe("svc.race", func(m *nats.Msg) {
		_ = wl.Respond(m, &nats.Msg{Data: []byte("ok")}, time.Now().Add(time.Second))
	}); err != nil {
		t.Fatal(err)
	}
	if err := wnc.Flush(); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, _ = caller.Request("svc.race", nil, 100*time.Millisecond)
		}
	}()
	for range 10 {
		_ = wnc.ForceReconnect()
		time.Sleep(30 * time.Millisecond)
	}
	close(stop)
	<-done
	natstest.CheckFor(t, 5*time.Second, 20*time.Millisecond, func() error {
		if st, why, _ := wl.State(); st != bus.LinkUp {
			return errors.New(st + ": " + why)
		}
		return nil
	})
}
