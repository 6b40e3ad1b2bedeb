package jetwaytest

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/bus/natstest"
)

// StartPebble runs Let's Encrypt's ACME test server (tools/pebble; .ci/run
// builds it and sets JETWAY_PEBBLE and JETWAY_PEBBLE_DIR, its module's
// folder with its test certificates) with every challenge taken as valid,
// and returns its directory URL, a client that trusts it, and the PEM
// file of the CA its TLS certificate chains to.
func StartPebble(t testing.TB) (dirURL string, client *http.Client, rootsFile string) {
	t.Helper()
	bin, dir := os.Getenv("JETWAY_PEBBLE"), os.Getenv("JETWAY_PEBBLE_DIR")
	if bin == "" || dir == "" {
		t.Skip("JETWAY_PEBBLE / JETWAY_PEBBLE_DIR not set (.ci/run builds pebble from tools/pebble and sets them)")
	}
	port := func() int {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = l.Close() }()
		return l.Addr().(*net.TCPAddr).Port
	}
	api, mgmt := port(), port()
	cfg := map[string]any{"pebble": map[string]any{
		"listenAddress":           fmt.Sprintf("127.0.0.1:%d", api),
		"managementListenAddress": fmt.Sprintf("127.0.0.1:%d", mgmt),
		"certificate":             filepath.Join(dir, "test/certs/localhost/cert.pem"),
		"privateKey":              filepath.Join(dir, "test/certs/localhost/key.pem"),
		"httpPort":                port(), "tlsPort": port(),
		"externalAccountBindingRequired": false,
	}}
	b, _ := json.Marshal(cfg)
	cfgFile := filepath.Join(t.TempDir(), "pebble.json")
	if err := os.WriteFile(cfgFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-config", cfgFile)
	cmd.Env = append(os.Environ(), "PEBBLE_VA_ALWAYS_VALID=1", "PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0", "PEBBLE_AUTHZREUSE=100")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("pebble:\n%s", out.String())
		}
	})
	rootsFile = filepath.Join(dir, "test/certs/pebble.minica.pem")
	roots, err := os.ReadFile(rootsFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(roots)
	client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	dirURL = fmt.Sprintf("https://127.0.0.1:%d/dir", api)
	natstest.CheckFor(t, 15*time.Second, 50*time.Millisecond, func() error {
		resp, err := client.Get(dirURL)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		return nil
	})
	return dirURL, client, rootsFile
}
