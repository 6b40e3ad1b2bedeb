package registry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
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

// ErrSignedBeforeLoss is returned for a request signed before the nonce
// bucket in use was created: the nonces claimed before went with the old
// bucket, so such a request might be a replay that nothing remembers.
var ErrSignedBeforeLoss = errors.New("signed before the replay record was lost; sign again")

// NonceStore claims nonces in a JetStream KV bucket shared by every edge:
// the first Create of a key wins, so a replay fails on any edge.
//
// A bucket deleted while the bus is up (by an operator, or by nats kv del)
// heals: a claim that finds the bucket gone starts one re-open in the
// background — bind, or create where this connection's user may — at most
// once per nonceReopenMin, backing off to nonceReopenMax while it keeps
// failing. The claim itself fails at once (signed requests are refused,
// never let through). The handle in use is kept meanwhile: a KV claim is a
// publish on the bucket's subject, so it works again the moment anyone
// (this store, KeepNonces in the admin node) re-creates the bucket. An
// edge whose NATS user may not create streams therefore recovers as soon as
// the admin node has re-created it.
//
// A re-created bucket has forgotten the nonces claimed before, so a claim
// also refuses (ErrSignedBeforeLoss) a request signed before the bucket's
// stream was created — or before this store heard of its deletion — which
// could be a replay of a request claimed in the old bucket. The store
// learns the creation time when it opens the bucket; when a claim's
// revision is not above one it knew before sending (a re-created stream
// numbers from 1 again: no edge need have seen the outage); on the
// deletion advisory (at once: "not before now"); and every nonceLearnEvery
// as a fallback. An ordinary claim only adds atomic operations (no lock, no
// syscall) to the KV create. Not covered: a client whose clock runs ahead
// by more than the outage stamps requests sent before it with times after
// the re-creation; a replay of those passes.
type NonceStore struct {
	nc *nats.Conn
	o  BucketOptions

	kv atomic.Pointer[jetstream.KeyValue] // nil until first opened; read without a lock

	mu sync.Mutex // only for the first open: claims on an open bucket never take it

	notBefore atomic.Int64  // Unix ns: a request signed earlier is refused
	seenRev   atomic.Uint64 // a revision of the bucket's current stream: its stream info's last, or a claim's
	watching  atomic.Bool   // the deletion advisory and the periodic look are set up

	reopening atomic.Bool  // a background re-open is running
	nextTry   atomic.Int64 // Unix ns before which no re-open starts
	backoff   atomic.Int64 // the wait after the next failed re-open
}

// Re-open pacing of a NonceStore whose bucket is gone.
const (
	nonceReopenMin     = time.Second
	nonceReopenMax     = 30 * time.Second
	nonceReopenTimeout = 5 * time.Second
)

// NewNonceStore returns a store that opens its bucket on first use.
func NewNonceStore(nc *nats.Conn, o BucketOptions) *NonceStore { return &NonceStore{nc: nc, o: o} }

func (s *NonceStore) bucket(ctx context.Context) (jetstream.KeyValue, error) {
	if kv := s.kv.Load(); kv != nil {
		return *kv, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if kv := s.kv.Load(); kv != nil {
		return *kv, nil
	}
	kv, err := s.open(ctx)
	if err != nil {
		return nil, err
	}
	s.kv.Store(&kv)
	s.watch()
	return kv, nil
}

// open binds (or creates) the bucket and learns its stream's creation: a
// handle is never used before its "not before" is known.
func (s *NonceStore) open(ctx context.Context) (jetstream.KeyValue, error) {
	js, err := jetstream.New(s.nc)
	if err != nil {
		return nil, err
	}
	kv, err := OpenNonces(ctx, js, s.o)
	if err != nil {
		return nil, err
	}
	if err := s.learn(ctx, kv); err != nil {
		return nil, err
	}
	return kv, nil
}

// learn reads the bucket's stream info: requests signed before its
// creation are refused from now on, and its last sequence is a revision a
// later claim in the same stream must exceed.
func (s *NonceStore) learn(ctx context.Context, kv jetstream.KeyValue) error {
	st, err := kv.Status(ctx)
	if err != nil {
		return fmt.Errorf("reading the creation of bucket %s: %w", BucketNonces, err)
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return fmt.Errorf("reading the creation of bucket %s: no stream info", BucketNonces)
	}
	info := bs.StreamInfo()
	// Signatures carry whole seconds: a request signed in the second the
	// bucket was created passes. None claimed in the old bucket was: no
	// bucket is re-created within nonceRecreateAfter of its deletion.
	s.lostBefore(info.Created.Truncate(time.Second))
	s.seenRev.Store(info.State.LastSeq)
	return nil
}

// lostBefore refuses from now on requests signed before t. It only ever
// moves forward, and never past the present: a NATS server whose clock is
// ahead must not refuse every request for as long.
func (s *NonceStore) lostBefore(t time.Time) {
	ns := min(t.UnixNano(), time.Now().UnixNano())
	for {
		cur := s.notBefore.Load()
		if ns <= cur || s.notBefore.CompareAndSwap(cur, ns) {
			return
		}
	}
}

// NotBefore is the signing time before which requests are refused: the
// creation of the bucket in use, or the moment this store heard it was
// deleted; zero before the bucket was first opened.
func (s *NonceStore) NotBefore() time.Time {
	if ns := s.notBefore.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// watch starts, once, listening to the bucket's deletion advisory and a
// look at its stream every nonceLearnEvery, for a deletion whose advisory
// was missed (a reconnect) that no claim revealed. Both end with the
// connection. An edge user without the advisory in its allow list (an
// external cluster's older configuration) still has the other two ways.
func (s *NonceStore) watch() {
	if !s.watching.CompareAndSwap(false, true) {
		return
	}
	kick := make(chan struct{}, 1)
	sub, err := s.nc.Subscribe(nonceDeletedAdvisory, func(*nats.Msg) {
		s.lostBefore(time.Now()) // whatever was claimed until now is gone
		select {
		case kick <- struct{}{}:
		default:
		}
	})
	if err != nil {
		sub = nil
	} else {
		// Once per store: the subscription is in place on the server
		// before the claim that started it returns, so a deletion right
		// after is heard, not learned a minute later from the stream.
		_ = s.nc.FlushTimeout(nonceReopenTimeout)
	}
	go func() {
		t := time.NewTicker(nonceLearnEvery)
		defer t.Stop()
		for {
			select {
			case <-t.C:
			case <-kick:
			}
			if s.nc.IsClosed() {
				if sub != nil {
					_ = sub.Unsubscribe()
				}
				return
			}
			if kv := s.kv.Load(); kv != nil {
				ctx, cancel := context.WithTimeout(context.Background(), nonceReopenTimeout)
				_ = s.learn(ctx, *kv) // a bucket still gone: claims fail and re-open it
				cancel()
			}
		}
	}()
}

// bucketGone reports whether err says the bucket's stream does not exist:
// a KV write is a publish, which no stream answers then.
func bucketGone(err error) bool {
	return errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, jetstream.ErrStreamNotFound) ||
		errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, nats.ErrNoResponders)
}

// reopen starts one background re-open of the bucket, unless one runs or
// the last failed too recently.
func (s *NonceStore) reopen() {
	if time.Now().UnixNano() < s.nextTry.Load() || !s.reopening.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer s.reopening.Store(false)
		time.Sleep(nonceRecreateAfter) // as KeepNonces: never a new bucket within a second of the old one's end
		ctx, cancel := context.WithTimeout(context.Background(), nonceReopenTimeout)
		defer cancel()
		kv, err := s.open(ctx)
		if err == nil {
			s.kv.Store(&kv)
			s.backoff.Store(0)
			s.nextTry.Store(0)
			return
		}
		wait := time.Duration(s.backoff.Load())
		wait = min(max(wait, nonceReopenMin), nonceReopenMax)
		s.backoff.Store(int64(min(2*wait, nonceReopenMax)))
		s.nextTry.Store(time.Now().Add(wait).UnixNano())
	}()
}

// OpenNonces opens the jetway_nonces bucket, creating it when missing.
func OpenNonces(ctx context.Context, js jetstream.JetStream, o BucketOptions) (jetstream.KeyValue, error) {
	return openBucket(ctx, js, jetstream.KeyValueConfig{
		Bucket: BucketNonces, Description: "Jetway: nonces of signed requests (anti-replay)",
		TTL: NonceTTL, History: 1, Replicas: max(o.Replicas, 1),
	})
}

// Claim records the nonce of a request signed at signed; ErrReplay if it
// was seen, ErrSignedBeforeLoss if it was signed before the replay record
// was lost, another error if the store cannot be reached (callers must
// then refuse: fail closed).
func (s *NonceStore) Claim(ctx context.Context, key string, signed time.Time) error {
	at := signed.UnixNano()
	if at < s.notBefore.Load() {
		return ErrSignedBeforeLoss
	}
	kv, err := s.bucket(ctx)
	if err != nil {
		return fmt.Errorf("nonce store: %w", err)
	}
	// Any revision known now was sequenced before this create is sent: in
	// the same stream, the claim's revision is above it.
	known := s.seenRev.Load()
	rev, err := kv.Create(ctx, key, nil)
	switch {
	case errors.Is(err, jetstream.ErrKeyExists):
		return ErrReplay
	case bucketGone(err):
		s.reopen()
		return fmt.Errorf("nonce store: bucket %s is gone, re-opening it: %w", BucketNonces, err)
	case err != nil:
		return fmt.Errorf("nonce store: %w", err)
	}
	if rev <= known {
		// A re-created stream: learn when, before answering.
		if err := s.learn(ctx, kv); err != nil {
			return fmt.Errorf("nonce store: bucket %s was re-created: %w", BucketNonces, err)
		}
	} else {
		for cur := known; rev > cur && !s.seenRev.CompareAndSwap(cur, rev); {
			cur = s.seenRev.Load()
		}
	}
	if at < s.notBefore.Load() {
		return ErrSignedBeforeLoss
	}
	return nil
}

// KeepNonces re-creates the nonce bucket whenever JetStream reports its
// stream deleted, until ctx ends; it also checks every nonceKeepEvery, for
// an advisory missed while disconnected, each time checking that the
// stream stores a write (keepNoncesOnce), and retries a failed re-creation
// from nonceReopenMin on. The admin node (serve) runs it over its admin
// connection, for the edges whose NATS user may not create streams: their
// stores recover as soon as the bucket is back. onErr (may be nil) hears
// of a failed re-creation; retries back off to nonceKeepEvery.
func KeepNonces(ctx context.Context, nc *nats.Conn, o BucketOptions, onErr func(error)) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	kick := make(chan struct{}, 1)
	sub, err := nc.Subscribe(nonceDeletedAdvisory, func(*nats.Msg) {
		select {
		case kick <- struct{}{}:
		default: // a re-creation is pending already
		}
	})
	if err != nil {
		return fmt.Errorf("watching the nonce bucket: %w", err)
	}
	// The subscription is in place once KeepNonces returns: a deletion
	// right after is heard, not found by the next check 30 s later.
	if err := nc.FlushTimeout(nonceReopenTimeout); err != nil {
		_ = sub.Unsubscribe()
		return fmt.Errorf("watching the nonce bucket: %w", err)
	}
	go func() {
		defer func() { _ = sub.Unsubscribe() }()
		t := time.NewTimer(nonceKeepEvery)
		defer t.Stop()
		retry := nonceReopenMin // doubles while re-creation keeps failing
		recheck := 0            // quick checks still due after a deletion
		for {
			select {
			case <-ctx.Done():
				return
			case <-kick:
				recheck = nonceRechecks
				// The server sends the advisory before it removes the old
				// stream's files: a stream created at once can recover the
				// old messages and lose its files under it, and then never
				// answers a claim. Let the deletion finish.
				select {
				case <-ctx.Done():
					return
				case <-time.After(nonceRecreateAfter):
				}
			case <-t.C:
			}
			octx, cancel := context.WithTimeout(ctx, nonceReopenTimeout)
			err := keepNoncesOnce(octx, js, o)
			cancel()
			next := nonceKeepEvery
			if err == nil {
				retry = nonceReopenMin
				if recheck > 0 {
					// A bucket created while the old one's files were
					// still being removed may answer the first write
					// and lose its files just after: look again soon
					// rather than in 30 s.
					recheck--
					next = 2 * nonceRecreateAfter
				}
			} else if ctx.Err() == nil {
				next, retry = retry, min(2*retry, nonceKeepEvery)
				if onErr != nil {
					onErr(err)
				}
			}
			t.Reset(next)
		}
	}()
	return nil
}

// keepNoncesOnce opens the nonce bucket (binding when it exists: one
// stream info, creating it when missing) and checks that its stream stores
// a write. A stream that exists but answers no write is deleted, so that
// the next round creates it anew: the server sends the deletion advisory
// before it removes the old stream's files, and a stream created while a
// slow disk is still removing them loses its files and its subscription
// and never answers a claim again. A bucket that is not a KV bucket (an
// operator's stream of that name) is replaced too: the keeper owns it.
func keepNoncesOnce(ctx context.Context, js jetstream.JetStream, o BucketOptions) error {
	kv, err := OpenNonces(ctx, js, o)
	if err == nil {
		_, err = kv.Put(ctx, nonceProbeKey, nil)
		if err == nil {
			return nil
		}
	}
	if !errors.Is(err, jetstream.ErrNoStreamResponse) && !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, jetstream.ErrBadBucket) {
		return err
	}
	if derr := js.DeleteKeyValue(ctx, BucketNonces); derr != nil && !errors.Is(derr, jetstream.ErrBucketNotFound) {
		return fmt.Errorf("bucket %s stores nothing (%v); deleting it: %w", BucketNonces, err, derr)
	}
	return fmt.Errorf("bucket %s existed but stored nothing (%w); deleted it to create it anew", BucketNonces, err)
}

// nonceProbeKey is the key KeepNonces writes to check the bucket; no
// nonce key (app.nonce) has this shape, and the bucket's TTL expires it.
const nonceProbeKey = "jetway-keeper-probe"

// nonceKeepEvery is how often KeepNonces checks the bucket without an
// advisory; nonceRechecks how many quicker checks follow a deletion.
const (
	nonceKeepEvery = 30 * time.Second
	nonceRechecks  = 3
)

// nonceRecreateAfter is how long KeepNonces (and a store re-opening its
// bucket) lets the server finish deleting the bucket's stream. At least a
// second: a request signed in the second a bucket was created is let
// through, so no nonce of the bucket before may have been claimed in it.
const nonceRecreateAfter = time.Second

// nonceLearnEvery is how often a NonceStore reads its bucket's creation
// without a reason to.
const nonceLearnEvery = 15 * time.Second

// nonceDeletedAdvisory is the JetStream advisory published when the nonce
// bucket's stream is deleted.
const nonceDeletedAdvisory = bus.NonceBucketDeleted
