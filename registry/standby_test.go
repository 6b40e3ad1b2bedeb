package registry

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus/natstest"
)

// standby init on a standby a node has already opened buckets on: an
// empty bucket becomes the mirror; one with entries of its own is refused
// (the standby would serve them, not the primary's); a second init keeps
// the mirrors; the mirror follows a write on the primary.
func TestInitStandby(t *testing.T) {
	p, _, s, _ := natstest.RunStandbyPair(t, 3)
	pnc, snc := natstest.Connect(t, p[0]), natstest.Connect(t, s[0])
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sjs, _ := jetstream.New(snc)
	if _, err := OpenAPIs(ctx, sjs, BucketOptions{}); err != nil { // a worker that started first
		t.Fatal(err)
	}
	flags, err := OpenFlags(ctx, sjs, BucketOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := flags.Put(ctx, "degrade.x", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	states, err := InitStandby(ctx, snc, "primary", 1)
	if !errors.Is(err, ErrNotAMirror) || len(states) != 1 || states[0].Bucket != BucketAPIs || !states[0].Created {
		t.Fatalf("init over an empty apis bucket and a flags bucket with an entry: %+v, %v", states, err)
	}
	if err := sjs.DeleteKeyValue(ctx, BucketFlags); err != nil {
		t.Fatal(err)
	}
	if states, err = InitStandby(ctx, snc, "primary", 1); err != nil || len(states) != len(StandbyBuckets) || states[0].Created {
		t.Fatalf("second init: %+v, %v", states, err)
	}
	pjs, _ := jetstream.New(pnc)
	pkv, err := pjs.KeyValue(ctx, BucketAPIs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pkv.Put(ctx, "x", []byte("1")); err != nil {
		t.Fatal(err)
	}
	skv, err := sjs.KeyValue(ctx, BucketAPIs)
	if err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		_, err := skv.Get(ctx, "x")
		return err
	})
	lags, err := StandbyLag(ctx, snc)
	if err != nil || len(lags) != len(StandbyBuckets) {
		t.Fatalf("lag: %+v %v", lags, err)
	}
	for _, l := range lags {
		if l.Err != nil {
			t.Fatalf("lag of %s: %v", l.Bucket, l.Err)
		}
	}
}
