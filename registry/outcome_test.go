package registry_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/registry"
)

// selfSigned is a certificate for names and its key, in PEM.
func selfSigned(t *testing.T, names ...string) (certPEM, keyPEM string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}))
}

// noAck makes a bucket's stream store writes and answer none: a write
// that lands though its answer never comes.
// registryClient starts a server and a client of its registry, with a
// context for the test's calls.
func registryClient(t *testing.T) (context.Context, *nats.Conn, *registry.Client) {
	t.Helper()
	nc := natstest.Connect(t, natstest.RunServer(t))
	ctx := ctxTimeout(t, 30*time.Second)
	c, err := registry.NewClient(ctx, nc, registry.BucketOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ctx, nc, c
}

func noAck(t *testing.T, js jetstream.JetStream, bucket string) {
	t.Helper()
	ctx := ctxTimeout(t, 5*time.Second)
	st, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.NoAck = true
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
}

// The writes of certificates, shared JSON schemas, admin tokens, secrets
// and gRPC schemas that get no answer are *OutcomeUnknownError, as every
// other registry write: naming the bucket, the key and the command to
// check with, and read back (Recheck) as landed once they have.
func TestSideWritesWithoutAnswerAreOutcomeUnknown(t *testing.T) {
	ctx, nc, c := registryClient(t)
	var err error
	js, _ := jetstream.New(nc)
	certPEM, keyPEM := selfSigned(t, "api.example.com")
	if _, err := c.PutCert(ctx, &registry.Cert{Name: "web", CertPEM: certPEM, KeyPEM: keyPEM}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutJSONSchema(ctx, "money", []byte(`{"type":"number"}`)); err != nil {
		t.Fatal(err)
	}
	_, tok, err := c.CreateAdminToken(ctx, "ops", registry.RoleViewer)
	if err != nil {
		t.Fatal(err)
	}
	secret := []byte(`{"url":"nats://partner:4222"}`)
	for _, b := range []string{registry.BucketCerts, registry.BucketJSONSchemas, bus.BucketAdminTokens, registry.BucketSecrets, registry.BucketSchemas} {
		noAck(t, js, b)
	}
	set := testingSet(t)
	parsed, _, err := registry.ParseSchema(set)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct {
		name, op, bucket, key, check string
		write                        func(ctx context.Context) error
	}{
		{"cert delete", "delete", registry.BucketCerts, "web", "jetway cert list",
			func(ctx context.Context) error { return c.DeleteCert(ctx, "web") }},
		{"json schema delete", "delete", registry.BucketJSONSchemas, "money", "jetway jsonschema get money",
			func(ctx context.Context) error { return c.DeleteJSONSchema(ctx, "money") }},
		{"token revoke", "delete", bus.BucketAdminTokens, tok.ID, "GET /v1/tokens",
			func(ctx context.Context) error { return c.RevokeAdminToken(ctx, tok.ID) }},
		{"secret put", "put", registry.BucketSecrets, bus.SecretKey("orders", "partner"), "jetway secret list --pool orders",
			func(ctx context.Context) error { _, err := c.PutSecret(ctx, "orders", "partner", secret); return err }},
		{"secret delete", "delete", registry.BucketSecrets, bus.SecretKey("orders", "partner"), "jetway secret list --pool orders",
			func(ctx context.Context) error { return c.DeleteSecret(ctx, "orders", "partner") }},
		{"grpc schema put", "put", registry.BucketSchemas, registry.SchemaKey(parsed.Digest), "jetway schema list",
			func(ctx context.Context) error { _, err := c.PutSchema(ctx, set); return err }},
	} {
		t.Run(w.name, func(t *testing.T) {
			wctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			err := w.write(wctx)
			cancel()
			var ue *registry.OutcomeUnknownError
			if !errors.Is(err, registry.ErrOutcomeUnknown) || !errors.As(err, &ue) {
				t.Fatalf("want ErrOutcomeUnknown, got %v", err)
			}
			if ue.Op != w.op || ue.Bucket != w.bucket || ue.Key != w.key || ue.Check != w.check {
				t.Errorf("op %q bucket %q key %q check %q; want %q %q %q %q", ue.Op, ue.Bucket, ue.Key, ue.Check, w.op, w.bucket, w.key, w.check)
			}
			if msg := err.Error(); !strings.Contains(msg, "may or may not have landed") || !strings.Contains(msg, "check with `"+w.check+"`") {
				t.Errorf("message: %s", msg)
			}
			if landed, _, err := ue.Recheck(ctxTimeout(t, 5*time.Second), js); err != nil || !landed {
				t.Errorf("read back: landed %v, %v; want landed (no_ack stores the write)", landed, err)
			}
		})
	}
}

// A promote whose draft removal gets no answer is promoted all the same
// (the API is returned), and says the removal's outcome is unknown,
// naming the draft to check.
func TestPromoteDraftRemovalWithoutAnswer(t *testing.T) {
	ctx, nc, c := registryClient(t)
	var err error
	d, err := c.PutDraft(ctx, draftEntry("orders", "/orders", "key"))
	if err != nil {
		t.Fatal(err)
	}
	// The stream now stores the production key only; a subscriber takes
	// the draft's removal and never answers.
	js, _ := jetstream.New(nc)
	st, err := js.Stream(ctx, "KV_"+registry.BucketAPIs)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.Subjects = []string{"$KV." + registry.BucketAPIs + ".orders"}
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	hold, err := nc.SubscribeSync("$KV." + registry.BucketAPIs + ".draft.>")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hold.Unsubscribe() }()
	_ = nc.Flush()
	pctx, cancel := context.WithTimeout(context.Background(), time.Second)
	a, err := c.Promote(pctx, "orders", d.Revision, 0, true)
	cancel()
	if a == nil || a.Revision == 0 {
		t.Fatalf("not promoted: %v", err)
	}
	var ue *registry.OutcomeUnknownError
	if !errors.As(err, &ue) || ue.Op != "delete" || ue.Key != registry.DraftKey("orders") || ue.Check != "jetway api get --draft orders" {
		t.Fatalf("want the draft removal's outcome unknown, got %v", err)
	}
	if !strings.Contains(err.Error(), "orders is promoted at revision") {
		t.Errorf("message: %v", err)
	}
	if e, err := c.Get(ctxTimeout(t, 5*time.Second), "orders"); err != nil || e.Revision != a.Revision {
		t.Errorf("production entry: %v %v", e, err)
	}
}
