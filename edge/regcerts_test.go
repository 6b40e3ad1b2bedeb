package edge_test

import (
	"crypto/tls"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/edge"
	"github.com/jetway-gw/jetway/internal/jetwaytest"
	"github.com/jetway-gw/jetway/registry"
)

// A certificate put in the registry is served by every edge, for the
// names it covers, within a second; rotated (the entry replaced), every
// edge serves the new one within a second while connections opened before
// keep working; deleted, the names get the default again. An entry whose
// key does not match is refused at put.
func TestRegistryCertificatesOnEveryEdge(t *testing.T) {
	ca := jetwaytest.NewCA(t)
	dir := t.TempDir()
	now := time.Now()
	files := func(serial int64, name string) edge.CertFile {
		return ca.Issue(t, dir, serial, now.Add(-time.Minute), now.Add(time.Hour), name)
	}
	certsA, err := edge.LoadCerts([]edge.CertFile{files(100, "default.test")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	certsB, err := edge.LoadCerts([]edge.CertFile{files(101, "default.test")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	g := jetwaytest.StartWith(t, jetwaytest.Options{Edge: edge.Options{Certs: certsA}})
	g.Publish(`{"name":"rc.mock","pool":"p","route":{"path":"/m"},"backend":{"type":"mock","body":"mock"}}`)
	_, _, e2 := g.AddEdge(t, edge.Options{Certs: certsB})
	addrs := []string{tlsEdge(t, g, certsA), tlsEdgeOf(t, e2, certsB)}

	served := func(addr, name string) int64 {
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool, ServerName: name})
		if err != nil {
			return -1
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
	}
	put := func(serial int64) {
		t.Helper()
		f := files(serial, "shop.partner.test")
		certPEM, _ := os.ReadFile(f.Cert)
		keyPEM, _ := os.ReadFile(f.Key)
		if _, err := g.Client.PutCert(t.Context(), &registry.Cert{Name: "shop", CertPEM: string(certPEM), KeyPEM: string(keyPEM)}); err != nil {
			t.Fatal(err)
		}
	}
	waitServed := func(want int64) {
		t.Helper()
		natstest.CheckFor(t, jetwaytest.Wait, 10*time.Millisecond, func() error {
			for i, a := range addrs {
				if s := served(a, "shop.partner.test"); s != want {
					return fmt.Errorf("edge %d serves certificate %d for shop.partner.test, want %d", i, s, want)
				}
			}
			return nil
		})
	}
	if s := served(addrs[0], "shop.partner.test"); s != -1 {
		t.Fatalf("before the put shop.partner.test got a verifying certificate %d", s)
	}
	put(102)
	waitServed(102)
	c := tlsClient(ca.Pool, "shop.partner.test", true)
	if resp, err := c.Get("https://" + addrs[0] + "/m"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("a call with the registry certificate: %v %v", resp, err)
	}
	put(103) // rotate
	waitServed(103)
	if resp, err := c.Get("https://" + addrs[0] + "/m"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("the connection opened before the rotation: %v %v", resp, err)
	}
	if err := g.Client.DeleteCert(t.Context(), "shop"); err != nil {
		t.Fatal(err)
	}
	waitServed(-1) // the default, which does not cover the name
	// An exact name wins over a wildcard, whatever the entries' names.
	for _, c := range []struct {
		name   string
		serial int64
		host   string
	}{{"a-wild", 106, "*.partner.test"}, {"z-exact", 107, "shop.partner.test"}} {
		f := files(c.serial, c.host)
		certPEM, _ := os.ReadFile(f.Cert)
		keyPEM, _ := os.ReadFile(f.Key)
		if _, err := g.Client.PutCert(t.Context(), &registry.Cert{Name: c.name, CertPEM: string(certPEM), KeyPEM: string(keyPEM)}); err != nil {
			t.Fatal(err)
		}
	}
	waitServed(107)
	natstest.CheckFor(t, jetwaytest.Wait, 10*time.Millisecond, func() error {
		if s := served(addrs[1], "other.partner.test"); s != 106 {
			return fmt.Errorf("other.partner.test got %d, want the wildcard 106", s)
		}
		return nil
	})
	other := files(104, "other.test")
	certPEM, _ := os.ReadFile(other.Cert)
	keyPEM, _ := os.ReadFile(files(105, "other.test").Key)
	if _, err := g.Client.PutCert(t.Context(), &registry.Cert{Name: "bad", CertPEM: string(certPEM), KeyPEM: string(keyPEM)}); err == nil {
		t.Fatal("a certificate with another's key was put")
	}
}
