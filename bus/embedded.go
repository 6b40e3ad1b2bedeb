package bus

import (
	"crypto/tls"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// EmbeddedMaxPayload is the max payload of the embedded server: 8 MiB, the
// largest NATS recommends. It leaves room for a 1 MiB body (the default
// max_body) plus headers; an API can raise max_body up to this bound.
const EmbeddedMaxPayload = 8 << 20

// EmbeddedConfig describes the NATS server that `jetway serve` runs inside
// its own process.
type EmbeddedConfig struct {
	// Listen is host:port for clients; port 0 picks a free port.
	Listen string
	// DataDir holds JetStream's files.
	DataDir string
	// ServerName names the server in monitoring and JetStream metadata.
	ServerName string
	// Credentials, when set, turn authentication on: one user per role,
	// with least-privilege permissions (RolePermissions).
	Credentials Credentials
	// TLS, when set, makes the client listener TLS only (ServerTLS; with a
	// client CA, mutual TLS). In-process connections need none.
	TLS *tls.Config
}

// StartEmbedded starts a nats-server with JetStream and waits until it
// accepts clients. Stop it with Shutdown and WaitForShutdown.
func StartEmbedded(cfg EmbeddedConfig) (*server.Server, error) {
	host, portStr, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("parsing nats listen address %q: %w", cfg.Listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("parsing nats listen port %q: %w", portStr, err)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	} else {
		// nats-server only notices a taken port inside its accept loop and
		// then never becomes ready; find out now, with a clear error.
		ln, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("embedded nats cannot listen on %s: %w", cfg.Listen, err)
		}
		_ = ln.Close() // only a probe of the port
	}
	name := cfg.ServerName
	if name == "" {
		name = "jetway-embedded"
	}
	opts := &server.Options{
		ServerName: name,
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   filepath.Join(cfg.DataDir, "nats"),
		MaxPayload: EmbeddedMaxPayload,
		NoSigs:     true,
		NoLog:      true,
	}
	if cfg.Credentials != nil {
		opts.Users = cfg.Credentials.users()
	}
	if cfg.TLS != nil {
		opts.TLSConfig, opts.TLS, opts.TLSTimeout = cfg.TLS, true, 2
		opts.TLSVerify = cfg.TLS.ClientAuth == tls.RequireAndVerifyClientCert
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("creating embedded nats server: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("embedded nats server not ready after 10s (is %s in use?)", cfg.Listen)
	}
	return s, nil
}
