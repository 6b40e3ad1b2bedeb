// Package natstest starts real nats-servers for tests, in the style of
// nats-server's own test helpers: JetStream on, a random port, data in
// t.TempDir(), shut down by t.Cleanup. Every integration test in Jetway uses
// it; nothing in Jetway mocks NATS.
package natstest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// RunServer starts a nats-server with JetStream on a random loopback port.
func RunServer(t testing.TB) *server.Server {
	t.Helper()
	return RunServerWithOptions(t, DefaultOptions(t))
}

// DefaultOptions are the options RunServer uses; tweak and pass them to
// RunServerWithOptions.
func DefaultOptions(t testing.TB) *server.Options {
	return &server.Options{
		Host:       "127.0.0.1",
		Port:       server.RANDOM_PORT,
		JetStream:  true,
		StoreDir:   t.TempDir(),
		MaxPayload: 8 << 20,
		NoLog:      true,
		NoSigs:     true,
	}
}

// RunServerWithOptions starts a server with the given options.
func RunServerWithOptions(t testing.TB, opts *server.Options) *server.Server {
	t.Helper()
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("creating nats server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatalf("nats server not ready")
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

// Connect returns a client connection to s, closed by t.Cleanup.
func Connect(t testing.TB, s *server.Server, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL(), opts...)
	if err != nil {
		t.Fatalf("connecting to nats: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// CheckFor calls f every sleep until it returns nil or wait has passed, then
// fails the test with f's last error. Use it instead of fixed sleeps.
func CheckFor(t testing.TB, wait, sleep time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(wait)
	var err error
	for time.Now().Before(deadline) {
		if err = f(); err == nil {
			return
		}
		time.Sleep(sleep)
	}
	t.Fatalf("condition not met after %v: %v", wait, err)
}

// FreePort returns a loopback TCP port that was free a moment ago, for a
// server that must come back on the same address after a restart.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port
}

// RunCluster starts n servers with JetStream routed into one cluster,
// each tweaked by tweak (nil: none), waits until JetStream answers (a meta
// leader is elected) and returns them with the client URL list that
// reaches them all. t.Cleanup shuts them down.
func RunCluster(t testing.TB, n int, tweak func(*server.Options)) ([]*server.Server, string) {
	t.Helper()
	ports := make([]int, n)
	routes := make([]*url.URL, n)
	for i := range ports {
		ports[i] = FreePort(t)
		routes[i] = &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", ports[i])}
	}
	servers := make([]*server.Server, n)
	urls := make([]string, n)
	for i := range servers {
		o := DefaultOptions(t)
		o.ServerName = fmt.Sprintf("n%d", i)
		o.Cluster = server.ClusterOpts{Name: "test", Host: "127.0.0.1", Port: ports[i]}
		o.Routes = routes
		if tweak != nil {
			tweak(o)
		}
		s, err := server.NewServer(o)
		if err != nil {
			t.Fatalf("creating nats server %d: %v", i, err)
		}
		go s.Start()
		servers[i] = s
		t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	}
	for i, s := range servers {
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatalf("nats server %d of the cluster not ready", i)
		}
		urls[i] = s.ClientURL()
	}
	all := strings.Join(urls, ",")
	nc, err := nats.Connect(all)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// Ready when a file stream of n replicas can be placed three times
	// in a row: every peer is known online to the meta leader, and stays
	// so (JetStream answering is not enough; a peer can still flap to
	// "offline" just after the first placement while the cluster settles).
	ok := 0
	CheckFor(t, 30*time.Second, 100*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "natstest_ready", Subjects: []string{"natstest.ready"}, Replicas: n, Storage: jetstream.FileStorage}); err != nil {
			ok = 0
			return err
		}
		if err := js.DeleteStream(ctx, "natstest_ready"); err != nil {
			ok = 0
			return err
		}
		if ok++; ok < 3 {
			return fmt.Errorf("placed %d time(s) in a row", ok)
		}
		return nil
	})
	return servers, all
}
