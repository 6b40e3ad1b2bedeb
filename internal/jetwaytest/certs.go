package jetwaytest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/edge"
)

// CA signs the certificates of TLS tests, made at test time. Pool trusts it.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	Pool *x509.CertPool
	// OCSP, when set, is the responder URL leaves issued from then on
	// name, and their files carry the CA after the leaf (the issuer a
	// stapler needs).
	OCSP string
}

// Certificate is the CA's certificate; Signer its key (an OCSP
// responder's test signs with them).
func (ca *CA) Certificate() *x509.Certificate { return ca.cert }

// Signer is the CA's private key.
func (ca *CA) Signer() *ecdsa.PrivateKey { return ca.key }

// File writes the CA's certificate into dir as name and returns its path:
// a CA file to give a flag or an entry.
func (ca *CA) File(t testing.TB, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	WriteFile(t, p, ca.PEM())
	return p
}

// PEM is the CA's certificate, for a CA file.
func (ca *CA) PEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw})
}

// NewCA makes a CA valid for an hour.
func NewCA(t testing.TB) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "jetway test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &CA{cert: cert, key: key, Pool: pool}
}

// Issue writes a leaf for names (valid from notBefore to notAfter) and its
// key into dir, named after serial, and returns the two paths.
func (ca *CA) Issue(t testing.TB, dir string, serial int64, notBefore, notAfter time.Time, names ...string) edge.CertFile {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: notBefore, NotAfter: notAfter, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	if ca.OCSP != "" {
		tmpl.OCSPServer = []string{ca.OCSP}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	f := edge.CertFile{Cert: filepath.Join(dir, fmt.Sprintf("%d.crt", serial)), Key: filepath.Join(dir, fmt.Sprintf("%d.key", serial))}
	chain := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if ca.OCSP != "" {
		chain = append(chain, ca.PEM()...)
	}
	WriteFile(t, f.Cert, chain)
	WriteFile(t, f.Key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}))
	return f
}

// WriteFile writes b to name through a rename, as a certificate manager
// does: a reader sees the old file or the new one.
func WriteFile(t testing.TB, name string, b []byte) {
	t.Helper()
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, name); err != nil {
		t.Fatal(err)
	}
}
