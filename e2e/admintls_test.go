package e2e

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/internal/jetwaytest"
)

// serve --admin-tls-cert: the admin listener, the REST API with it,
// answers over TLS only.
func TestAdminListenerTLS(t *testing.T) {
	t.Parallel()
	ca := jetwaytest.NewCA(t)
	dir := t.TempDir()
	now := time.Now()
	cert := ca.Issue(t, dir, 80, now.Add(-time.Minute), now.Add(time.Hour), "localhost")
	token := "e2e-admin-tls-0123456789abcdef0123456789"
	s := startNode(t, "serve", "serve", "", "--admin-tls-cert", cert.Cert, "--admin-tls-key", cert.Key, "--admin-token", token)
	base := strings.Replace(strings.Replace(s.admin, "http://", "https://", 1), "127.0.0.1", "localhost", 1)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool}}}
	natstest.CheckFor(t, startTimeout, pollEvery, func() error {
		req, _ := http.NewRequest(http.MethodGet, base+"/v1/apis", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"items"`) {
			return fmt.Errorf("GET /v1/apis over TLS: %d %s", resp.StatusCode, b)
		}
		return nil
	})
	if resp, err := http.Get(s.admin + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("the admin listener answered plain HTTP")
		}
	}
}
