package registry

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/schemas"
)

// BucketCerts holds the edges' TLS certificates: key = a certificate's
// name. The private keys are in it, so only the admin writes it and only
// edges read it (bus.RolePermissions); workers never watch it.
const BucketCerts = bus.BucketCerts

// Cert is one TLS certificate chain and its key, served by every edge with
// TLS to the clients whose server name it covers. Replacing the entry
// rotates it on every edge; deleting it stops serving it.
type Cert struct {
	Name    string `json:"name"`
	CertPEM string `json:"cert_pem"`
	KeyPEM  string `json:"key_pem"`

	Revision uint64           `json:"-"`
	TLS      *tls.Certificate `json:"-"` // parsed, its Leaf set
}

// ParseCert parses and checks a certificate entry: its name is a valid
// name equal to key, the key matches the chain, and the certificate is
// valid now.
func ParseCert(key string, doc []byte) (*Cert, error) {
	var c Cert
	if err := strictJSON(doc, &c); err != nil {
		return nil, &ValidationError{Key: key, Problems: []schemas.Problem{{Message: err.Error()}}}
	}
	var ps []schemas.Problem
	add := func(path, format string, args ...any) {
		ps = append(ps, schemas.Problem{Path: path, Message: fmt.Sprintf(format, args...)})
	}
	if err := bus.ValidName(c.Name); err != nil {
		add("name", "%v", err)
	} else if key != "" && key != c.Name {
		add("name", "must equal the key it is stored under (%q)", key)
	}
	pair, err := tls.X509KeyPair([]byte(c.CertPEM), []byte(c.KeyPEM))
	if err != nil {
		add("cert_pem", "with key_pem: %v", err)
	} else if now := time.Now(); now.After(pair.Leaf.NotAfter) || now.Before(pair.Leaf.NotBefore) {
		add("cert_pem", "is valid from %s to %s, not now", pair.Leaf.NotBefore.Format(time.RFC3339), pair.Leaf.NotAfter.Format(time.RFC3339))
	} else if len(pair.Leaf.DNSNames) == 0 {
		add("cert_pem", "names no host (DNS SAN): no client could be served it")
	}
	if len(ps) > 0 {
		return nil, &ValidationError{Key: key, Problems: ps}
	}
	c.TLS = &pair
	return &c, nil
}

// Marshal is the entry as stored.
func (c *Cert) Marshal() []byte {
	b, _ := json.Marshal(c)
	return b
}

// OpenCerts opens the jetway_certs bucket, creating it when missing.
func OpenCerts(ctx context.Context, js jetstream.JetStream, o BucketOptions) (jetstream.KeyValue, error) {
	return openBucket(ctx, js, jetstream.KeyValueConfig{
		Bucket:      BucketCerts,
		Description: "Jetway edge TLS certificates and their keys (key = name): admin writes, edges read",
		History:     HistoryDepth,
		Replicas:    max(o.Replicas, 1),
	})
}

// PutCert checks and stores a certificate.
func (c *Client) PutCert(ctx context.Context, cert *Cert, opts ...WriteOption) (*Cert, error) {
	doc := cert.Marshal()
	parsed, err := ParseCert(cert.Name, doc)
	if err != nil {
		return nil, err
	}
	rev, err := write(ctx, c.certs, "certificate", cert.Name, doc, opts)
	if err != nil {
		return nil, c.notedLater(err, "cert", "put", cert.Name)
	}
	parsed.Revision = rev
	return parsed, c.noted(ctx, "cert", "put", cert.Name, rev, nil)
}

// DeleteCert removes a certificate: edges stop serving it.
func (c *Client) DeleteCert(ctx context.Context, name string) error {
	if _, err := c.certs.Get(ctx, name); errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("certificate %s: %w", name, ErrNotFound)
	} else if err != nil {
		return fmt.Errorf("reading certificate %s: %w", name, err)
	}
	if err := c.certs.Delete(ctx, name); err != nil {
		return c.notedLater(writeFailed(c.certs, "delete", "certificate", name, nil, 0, err), "cert", "delete", name)
	}
	return c.noted(ctx, "cert", "delete", name, 0, nil)
}

// ListCerts returns every stored certificate, sorted by name.
func (c *Client) ListCerts(ctx context.Context) ([]Listed[*Cert], error) {
	return listParsed(ctx, c.certs, ParseCert)
}
