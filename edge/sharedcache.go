package edge

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/registry"
)

// The shared response cache (cache.shared): the answers an edge keeps are
// also published to the jetway_cache bucket, and an edge that misses in
// its own memory looks there before it calls the backend. Only the call
// that answers a key's miss on an edge (its flight) looks, so a burst on
// one edge costs the bucket one read.
//
// An answer is one message on
//
//	$KV.jetway_cache.<api>.<tier>.<path>.<key>
//
// <api>, <path> and <key> hashes of the API's name, the routed path and the
// cache key with the settings' fingerprint (a changed API never reads the
// answers of its former self), <tier> p or s; a purge drops an API's, or
// one path's, by subject filter. Its headers are the answer's own HTTP
// headers (escaped as on the wire) and the status, times and key digest
// under Jetway-Cache-*; its data the body; its Nats-TTL the end of the
// last window it may be served in.
//
// What an edge writes there every edge serves: the bucket trusts the edge
// role (docs/security.md).

// Headers of a shared answer.
const (
	hdrSharedKey    = "Jetway-Cache-Key"    // hex SHA-256 of the fingerprint and key: a read checks it
	hdrSharedStatus = "Jetway-Cache-Status" // the status
	hdrSharedTimes  = "Jetway-Cache-Times"  // started, stored, fresh, swr, sie: Unix nanoseconds
	hdrSharedPath   = "Jetway-Cache-Path"   // the routed path, for a purge on an edge
)

// sharedGetTimeout bounds a read of the bucket: a slow or absent
// JetStream costs a miss this much at most.
const sharedGetTimeout = 50 * time.Millisecond

// sharedRetry is how long after failing to find the bucket an edge tries
// again, sharedBackoff how long after a failed read it reads again; until
// then shared caches work from memory alone.
const (
	sharedRetry   = 5 * time.Second
	sharedBackoff = time.Second
)

// sharedStore is an edge's access to the bucket.
type sharedStore struct {
	nc  *nats.Conn
	js  jetstream.JetStream
	log *slog.Logger

	stream  atomic.Pointer[streamRef] // nil until found
	nextTry atomic.Int64              // Unix nanoseconds: no look for the bucket, and no read, before then
	looking sync.Mutex                // one call looks for the bucket at a time
	warned  atomic.Bool               // the bucket's absence is logged once as a warning
}

type streamRef struct{ jetstream.Stream }

func newSharedStore(nc *nats.Conn, log *slog.Logger) *sharedStore {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil
	}
	return &sharedStore{nc: nc, js: js, log: log}
}

// bucket is the bucket's stream, nil while it cannot be found (looked for
// again after sharedRetry) or after a failed read (sharedBackoff). One
// call looks at a time; the others go without meanwhile.
func (s *sharedStore) bucket(ctx context.Context) jetstream.Stream {
	if time.Now().UnixNano() < s.nextTry.Load() {
		return nil
	}
	if r := s.stream.Load(); r != nil {
		return r.Stream
	}
	if !s.looking.TryLock() {
		return nil
	}
	defer s.looking.Unlock()
	if r := s.stream.Load(); r != nil {
		return r.Stream
	}
	st, err := s.js.Stream(ctx, "KV_"+registry.BucketCache)
	if err != nil {
		s.nextTry.Store(time.Now().Add(sharedRetry).UnixNano())
		log := s.log.Debug
		if !s.warned.Swap(true) {
			log = s.log.Warn
		}
		log("shared response cache unavailable; caches work from this edge's memory (the admin creates the bucket)", "bucket", registry.BucketCache, "err", err)
		return nil
	}
	s.stream.Store(&streamRef{st})
	return st
}

// sharedSubjects are an API tier's subjects in the bucket.
type sharedSubjects struct {
	prefix string // $KV.jetway_cache.<api>.<tier>.
	salt   string // the cache settings' fingerprint
}

func newSharedSubjects(a *registry.API, fingerprint string) sharedSubjects {
	tier := "p" // production, the sandbox tier and the draft never share answers
	switch {
	case a.IsDraft():
		tier = "d"
	case a.IsSandbox():
		tier = "s"
	}
	api := a.Name
	return sharedSubjects{prefix: sharedAPIPrefix(api) + tier + ".", salt: fingerprint}
}

// sharedAPIPrefix is "$KV.jetway_cache.<api>.": a name as a hash, for
// API names hold dots, and one name's subjects must not cover another's.
func sharedAPIPrefix(api string) string {
	return "$KV." + registry.BucketCache + "." + shortHash(api) + "."
}

func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:8])
}

// subject is where the answer to key, of path, is kept, and the digest its
// message carries.
func (ss sharedSubjects) subject(path, key string) (subject, digest string) {
	sum := sha256.Sum256([]byte(ss.salt + "\n" + key))
	digest = hex.EncodeToString(sum[:])
	return ss.prefix + shortHash(path) + "." + digest[:32], digest
}

// get reads the answer kept for key: nil when there is none (or the
// bucket cannot be read in time — sharedGetTimeout, within the call's
// deadline: a miss, logged at debug).
func (s *sharedStore) get(ctx context.Context, deadline time.Time, ss sharedSubjects, path, key string) *cachedAnswer {
	if d := time.Now().Add(sharedGetTimeout); d.Before(deadline) {
		deadline = d
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	st := s.bucket(ctx)
	if st == nil {
		return nil
	}
	subj, digest := ss.subject(path, key)
	m, err := st.GetLastMsgForSubject(ctx, subj)
	if err != nil {
		if !errors.Is(err, jetstream.ErrMsgNotFound) {
			// A slow or failing JetStream: the misses of the next while
			// go without it rather than each wait for it.
			s.nextTry.Store(time.Now().Add(sharedBackoff).UnixNano())
			s.log.Debug("shared response cache not read; memory alone for a while", "err", err, "for", sharedBackoff)
		}
		return nil
	}
	a, err := decodeShared(m.Header, m.Data, digest)
	if err != nil {
		if m.Header.Get(hdrSharedKey) != "" { // not an expiry's marker: say so
			s.log.Warn("shared response cache: an answer does not read", "subject", subj, "err", err)
		}
		return nil
	}
	return a
}

// put keeps an answer for every edge, until the end of the last window it
// may be served in. A publish without an ack: nothing waits for it, and a
// lost one costs a miss.
func (s *sharedStore) put(ss sharedSubjects, key string, a *cachedAnswer) {
	ttl := time.Until(latest(a.fresh, a.swrUntil, a.sieUntil))
	if ttl <= 0 {
		return
	}
	subj, digest := ss.subject(a.path, key)
	h := make(nats.Header, len(a.header)+5)
	for k, vs := range a.header {
		h[k] = vs
	}
	bus.EncodeHTTPHeaders(h)
	h[hdrSharedKey] = []string{digest}
	h[hdrSharedStatus] = []string{strconv.Itoa(a.status)}
	h[hdrSharedTimes] = []string{fmt.Sprintf("%d,%d,%d,%d,%d", a.started.UnixNano(), a.stored.UnixNano(), a.fresh.UnixNano(), a.swrUntil.UnixNano(), a.sieUntil.UnixNano())}
	h[hdrSharedPath] = []string{a.path}
	// Whole seconds, rounded up: the server's TTLs are.
	h[jetstream.MsgTTLHeader] = []string{strconv.FormatInt(int64((ttl+time.Second-1)/time.Second), 10) + "s"}
	if err := s.nc.PublishMsg(&nats.Msg{Subject: subj, Header: h, Data: a.body}); err != nil {
		s.log.Debug("shared response cache not written", "err", err)
	}
}

func latest(ts ...time.Time) time.Time {
	var m time.Time
	for _, t := range ts {
		if t.After(m) {
			m = t
		}
	}
	return m
}

// decodeShared reads a kept answer, which must carry digest.
func decodeShared(h nats.Header, body []byte, digest string) (*cachedAnswer, error) {
	if h.Get(hdrSharedKey) != digest {
		return nil, errors.New("another key's answer")
	}
	status, err := strconv.Atoi(h.Get(hdrSharedStatus))
	if err != nil || status < 100 || status > 599 {
		return nil, fmt.Errorf("status %q", h.Get(hdrSharedStatus))
	}
	times := strings.Split(h.Get(hdrSharedTimes), ",")
	if len(times) != 5 {
		return nil, errors.New("times missing")
	}
	var t [5]time.Time
	for i, s := range times {
		ns, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("time %q", s)
		}
		t[i] = time.Unix(0, ns)
	}
	hh := make(http.Header, len(h))
	for k, vs := range h {
		if name, ok := bus.DecodeHeaderName(k); ok {
			hh[name] = vs
		}
	}
	return &cachedAnswer{path: h.Get(hdrSharedPath), status: status, header: hh, body: body,
		started: t[0], stored: t[1], fresh: t[2], swrUntil: t[3], sieUntil: t[4]}, nil
}

// PurgeShared drops an API's answers from the shared cache, both tiers:
// all, or those of one path (in any spelling: compared canonical). The
// admin runs it before it asks the edges to purge their own, so that no
// edge fills its memory again from the bucket in between.
func PurgeShared(ctx context.Context, js jetstream.JetStream, api, path string) error {
	st, err := js.Stream(ctx, "KV_"+registry.BucketCache)
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil // nothing was ever shared
		}
		return err
	}
	prefix := sharedAPIPrefix(api)
	filter := prefix + ">"
	if path != "" {
		if cp, err := canonicalPath(path); err == nil {
			path = cp
		}
		filter = prefix + "*." + shortHash(path) + ".>"
	}
	return st.Purge(ctx, jetstream.WithPurgeSubject(filter))
}
