package registry

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/crypto/acme/autocert"

	"github.com/jetway-gw/jetway/bus"
)

// BucketACME holds what ACME certificate management keeps: the account key
// and the certificates (with their keys) it obtained. Edges read and write
// it, so that a certificate one edge obtained is served by every edge
// without ordering it again.
const BucketACME = bus.BucketACME

// OpenACME opens the jetway_acme bucket, creating it when missing.
func OpenACME(ctx context.Context, js jetstream.JetStream, o BucketOptions) (jetstream.KeyValue, error) {
	return openBucket(ctx, js, jetstream.KeyValueConfig{
		Bucket:      BucketACME,
		Description: "Jetway ACME account key and certificates (autocert cache): edges read and write",
		History:     1,
		Replicas:    max(o.Replicas, 1),
		// Bounded: every edge may write it.
		MaxValueSize: 1 << 20,
		MaxBytes:     64 << 20,
	})
}

// ACMECache is an autocert.Cache over the jetway_acme bucket.
type ACMECache struct{ KV jetstream.KeyValue }

var _ autocert.Cache = ACMECache{}

// acmeKey maps an autocert key ("example.com", "example.com+rsa",
// "acme_account+key") to a KV key, which may not hold '+'.
func acmeKey(k string) (string, error) {
	out := strings.ReplaceAll(k, "+", "=")
	for i := 0; i < len(out); i++ {
		c := out[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == '=') {
			return "", fmt.Errorf("acme cache key %q cannot be stored", k)
		}
	}
	return out, nil
}

// Get reads an entry; a missing one is autocert.ErrCacheMiss.
func (c ACMECache) Get(ctx context.Context, key string) ([]byte, error) {
	k, err := acmeKey(key)
	if err != nil {
		return nil, err
	}
	e, err := c.KV.Get(ctx, k)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, autocert.ErrCacheMiss
	}
	if err != nil {
		return nil, err
	}
	return e.Value(), nil
}

// Put stores an entry.
func (c ACMECache) Put(ctx context.Context, key string, data []byte) error {
	k, err := acmeKey(key)
	if err != nil {
		return err
	}
	_, err = c.KV.Put(ctx, k, data)
	return err
}

// Delete removes an entry.
func (c ACMECache) Delete(ctx context.Context, key string) error {
	k, err := acmeKey(key)
	if err != nil {
		return err
	}
	if err := c.KV.Delete(ctx, k); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return err
	}
	return nil
}
