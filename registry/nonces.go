package registry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
)

// BucketNonces remembers the nonces of signed requests for NonceTTL, so
// that a request replayed on any edge of the cluster is refused.
const BucketNonces = bus.BucketNonces

// NonceTTL is how long a nonce is remembered: twice the ±5 minutes a
// signed request's timestamp may be off.
const NonceTTL = 10 * time.Minute

// ErrReplay is returned for a nonce seen before.
var ErrReplay = errors.New("nonce already used")

// NonceStore claims nonces in a JetStream KV bucket shared by every edge:
// the first Create of a key wins, so a replay fails on any edge.
type NonceStore struct {
	nc *nats.Conn
	o  BucketOptions

	mu sync.Mutex
	kv jetstream.KeyValue
}

// NewNonceStore returns a store that opens its bucket on first use.
func NewNonceStore(nc *nats.Conn, o BucketOptions) *NonceStore { return &NonceStore{nc: nc, o: o} }

func (s *NonceStore) bucket(ctx context.Context) (jetstream.KeyValue, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kv != nil {
		return s.kv, nil
	}
	js, err := jetstream.New(s.nc)
	if err != nil {
		return nil, err
	}
	kv, err := OpenNonces(ctx, js, s.o)
	if err != nil {
		return nil, err
	}
	s.kv = kv
	return kv, nil
}

// OpenNonces opens the jetway_nonces bucket, creating it when missing.
func OpenNonces(ctx context.Context, js jetstream.JetStream, o BucketOptions) (jetstream.KeyValue, error) {
	return openBucket(ctx, js, jetstream.KeyValueConfig{
		Bucket: BucketNonces, Description: "Jetway: nonces of signed requests (anti-replay)",
		TTL: NonceTTL, History: 1, Replicas: max(o.Replicas, 1),
	})
}

// Claim records a nonce; ErrReplay if it was seen, another error if the
// store cannot be reached (callers must then refuse: fail closed).
func (s *NonceStore) Claim(ctx context.Context, key string) error {
	kv, err := s.bucket(ctx)
	if err != nil {
		return fmt.Errorf("nonce store: %w", err)
	}
	_, err = kv.Create(ctx, key, nil)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return ErrReplay
	}
	if err != nil {
		return fmt.Errorf("nonce store: %w", err)
	}
	return nil
}
