// Command tlsbench is bench/run.sh's TLS helper:
//
//	tlsbench certs DIR
//	    writes a self-signed ECDSA P-256 certificate for 127.0.0.1 and
//	    localhost (DIR/cert.pem, DIR/key.pem), the kind most sites serve
//	tlsbench handshakes --addr HOST:PORT [--duration 5s] [--conns 8]
//	    makes full TLS handshakes (no session resumption) from --conns
//	    goroutines for --duration, closing each connection after its
//	    handshake, and prints "handshakes=N seconds=S"
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	switch os.Args[1] {
	case "certs":
		if len(os.Args) != 3 {
			usage()
		}
		if err := writeCert(os.Args[2]); err != nil {
			fail(err)
		}
	case "handshakes":
		fs := flag.NewFlagSet("handshakes", flag.ExitOnError)
		addr := fs.String("addr", "", "the TLS listener")
		d := fs.Duration("duration", 5*time.Second, "how long to handshake")
		conns := fs.Int("conns", 8, "concurrent clients")
		_ = fs.Parse(os.Args[2:])
		if *addr == "" {
			usage()
		}
		n, failed := handshakes(*addr, *d, *conns)
		if n == 0 {
			fail(fmt.Errorf("no handshake with %s succeeded (%d failed)", *addr, failed))
		}
		fmt.Printf("handshakes=%d failed=%d seconds=%.1f\n", n, failed, d.Seconds())
	default:
		usage()
	}
}

func writeCert(dir string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "cert.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "key.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
}

func handshakes(addr string, d time.Duration, conns int) (ok, failed int64) {
	var nOK, nFailed atomic.Int64
	cfg := &tls.Config{InsecureSkipVerify: true, ClientSessionCache: nil} //nolint:gosec // a benchmark of the server's handshakes
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
				if err != nil {
					nFailed.Add(1)
					continue
				}
				_ = c.Close()
				nOK.Add(1)
			}
		}()
	}
	wg.Wait()
	return nOK.Load(), nFailed.Load()
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: tlsbench certs DIR | tlsbench handshakes --addr HOST:PORT [--duration 5s] [--conns 8]")
	os.Exit(2)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "tlsbench:", err)
	os.Exit(1)
}
