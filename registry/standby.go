package registry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
)

// StandbyBuckets are the registry buckets a standby cluster mirrors from
// the primary: what its edges and workers need to serve every API as the
// primary would (entries, switches, apps, alert rules, certificates,
// schemas, topics, pool secrets). The rest (nonces, caches, ACME state,
// push acknowledgements, jobs) is each cluster's own.
//
// Not the edges' TLS certificates and keys (jetway_certs): the standby's
// workers do not need them, and the primary's edges read their own.
var StandbyBuckets = []string{
	BucketAPIs, BucketFlags, BucketApps, BucketAlerts, bus.BucketSchemas,
	bus.BucketJSONSchemas, bus.BucketTopics, bus.BucketSecrets,
}

// bucketOpeners open (creating when missing) each of StandbyBuckets.
var bucketOpeners = map[string]func(context.Context, jetstream.JetStream, BucketOptions) (jetstream.KeyValue, error){
	BucketAPIs: OpenAPIs, BucketFlags: OpenFlags, BucketApps: OpenApps, BucketAlerts: OpenAlerts,
	bus.BucketSchemas: OpenSchemas, bus.BucketJSONSchemas: OpenJSONSchemas,
	bus.BucketTopics: OpenTopics, bus.BucketSecrets: OpenSecrets,
}

// MirrorState is one standby bucket as InitStandby left it.
type MirrorState struct {
	Bucket  string
	Created bool // false: it was there already, mirroring the primary
}

// ErrNotAMirror is a standby bucket that holds entries of its own: the
// standby would serve them instead of the primary's.
var ErrNotAMirror = errors.New("bucket exists on the standby and is not a mirror of the primary's")

// InitStandby makes the cluster nc is connected to a standby of the
// primary cluster, the JetStream domain primaryDomain (reached through
// the leaf node connection between the two): each of StandbyBuckets is
// created as a mirror of the primary's bucket, with the primary's limits
// and replicas copies. Mirrors follow the primary while the link is up
// and keep the last copy while it is not. A bucket already mirroring the
// primary is kept; one with entries of its own is ErrNotAMirror.
func InitStandby(ctx context.Context, nc *nats.Conn, primaryDomain string, replicas int) ([]MirrorState, error) {
	if primaryDomain == "" {
		return nil, errors.New("the primary's JetStream domain is required")
	}
	local, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	primary, err := jetstream.NewWithDomain(nc, primaryDomain)
	if err != nil {
		return nil, err
	}
	var out []MirrorState
	for _, b := range StandbyBuckets {
		// Each step within a few seconds, again until ctx ends: a cluster
		// just started answers nothing until it has its meta leader.
		for {
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			st, err := mirrorBucket(sctx, local, primary, b, primaryDomain, replicas)
			cancel()
			if err == nil {
				out = append(out, st)
				break
			}
			if errors.Is(err, ErrNotAMirror) || ctx.Err() != nil {
				return out, fmt.Errorf("bucket %s: %w", b, err)
			}
			select {
			case <-ctx.Done():
				return out, fmt.Errorf("bucket %s: %w", b, err)
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
	return out, nil
}

func mirrorBucket(ctx context.Context, local, primary jetstream.JetStream, bucket, domain string, replicas int) (MirrorState, error) {
	st := MirrorState{Bucket: bucket}
	if s, err := local.Stream(ctx, "KV_"+bucket); err == nil {
		info := s.CachedInfo()
		m := info.Config.Mirror
		switch {
		case m != nil && m.Name == "KV_"+bucket && (m.Domain == domain || m.External != nil && m.External.APIPrefix == "$JS."+domain+".API"):
			return st, nil
		case info.State.Msgs > 0:
			return st, ErrNotAMirror
		}
		// Empty: a standby node opened it before init. It becomes the
		// mirror.
		if err := local.DeleteStream(ctx, "KV_"+bucket); err != nil {
			return st, err
		}
	} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return st, err
	}
	// The primary's bucket, created there when missing (a registry that
	// has not written that kind of entry yet).
	origin, err := bucketOpeners[bucket](ctx, primary, BucketOptions{Replicas: replicas})
	if err != nil {
		return st, fmt.Errorf("reading the primary's bucket (domain %s, through the leaf node link): %w", domain, err)
	}
	status, err := origin.Status(ctx)
	if err != nil {
		return st, err
	}
	info := status.(*jetstream.KeyValueBucketStatus).StreamInfo()
	_, err = local.CreateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:       bucket,
		Description:  "mirror of the primary's " + bucket + " (jetway standby init)",
		History:      uint8(min(max(info.Config.MaxMsgsPerSubject, 1), 64)),
		MaxBytes:     info.Config.MaxBytes,
		MaxValueSize: info.Config.MaxMsgSize,
		Storage:      info.Config.Storage,
		Replicas:     max(replicas, 1),
		Mirror:       &jetstream.StreamSource{Name: bucket, Domain: domain},
	})
	if err != nil {
		return st, err
	}
	st.Created = true
	return st, nil
}

// MirrorLag is how far a standby bucket is behind the primary's.
type MirrorLag struct {
	Bucket string
	// Lag is the messages not mirrored yet; Active how long ago the
	// mirror last heard from the primary (-1: never).
	Lag    uint64
	Active int64 // nanoseconds
	Err    error
}

// StandbyLag reads every standby bucket's mirror state.
func StandbyLag(ctx context.Context, nc *nats.Conn) ([]MirrorLag, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	var out []MirrorLag
	for _, b := range StandbyBuckets {
		ml := MirrorLag{Bucket: b, Active: -1}
		s, err := js.Stream(ctx, "KV_"+b)
		if err == nil {
			var info *jetstream.StreamInfo
			if info, err = s.Info(ctx); err == nil {
				if info.Mirror == nil {
					err = ErrNotAMirror
				} else {
					ml.Lag, ml.Active = info.Mirror.Lag, int64(info.Mirror.Active)
				}
			}
		}
		ml.Err = err
		out = append(out, ml)
	}
	return out, nil
}
