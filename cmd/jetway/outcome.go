package main

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/registry"
)

// lastRegistry is how the last command reached the registry (dialConn),
// for reading a key back after a write whose outcome is unknown.
var lastRegistry atomic.Pointer[registryFlags]

// How a write whose outcome is unknown is read back: each read with a
// fresh short timeout (the command's own has run out), for a few seconds
// in all, so that a cluster regaining quorum meanwhile can still show it.
const (
	settleFor   = 4 * time.Second
	settleRead  = time.Second
	settlePause = 250 * time.Millisecond
)

// settleUnknown reads back the key of a write whose outcome is unknown and
// reports whether it shows the write in force (then it says so on stdout).
// A read that shows the old state decides nothing: the write may still
// land (a leader that lost quorum can hold the proposal), so the outcome
// stays unknown. A write shown in force is then settled (ue.Settle): its
// audit record and follow-up steps, skipped when no answer came, are done
// now; err says what of them is missing (the write itself stands).
func settleUnknown(ue *registry.OutcomeUnknownError, stdout, stderr io.Writer) (landed bool, err error) {
	rf := lastRegistry.Load()
	if rf == nil || ue.Bucket == "" {
		return false, nil
	}
	fmt.Fprintf(stderr, "jetway: no answer from JetStream to the write of %s %s (%v); reading it back\n", ue.Kind, ue.Key, ue.Err)
	var nc *nats.Conn
	defer func() {
		if nc != nil {
			nc.Close()
		}
	}()
	deadline := time.Now().Add(settleFor)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), settleRead)
		landed, rev, err := recheck(ctx, rf, &nc, ue)
		cancel()
		if err == nil && landed {
			if ue.Op == "delete" {
				fmt.Fprintf(stdout, "deleted %s %s (read back: it is gone)\n", ue.Kind, ue.Key)
			} else {
				fmt.Fprintf(stdout, "wrote %s %s at revision %d (read back: the write landed)\n", ue.Kind, ue.Key, rev)
			}
			return true, settleLanded(rf, nc, ue)
		}
		if time.Now().Add(settlePause).After(deadline) {
			return false, nil
		}
		time.Sleep(settlePause)
	}
}

// settleLanded runs the settle steps of a write read back in force (its
// audit record, its follow-up) on nc, within the command's --timeout.
func settleLanded(rf *registryFlags, nc *nats.Conn, ue *registry.OutcomeUnknownError) error {
	js, err := jetstream.New(nc)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), max(*rf.timeout, settleRead))
		defer cancel()
		err = ue.Settle(ctx, js)
	}
	if err != nil {
		return fmt.Errorf("the write of %s %s landed, but what follows it did not all happen: %w", ue.Kind, ue.Key, err)
	}
	return nil
}

// recheck is one read-back, on a connection of its own made on first use.
func recheck(ctx context.Context, rf *registryFlags, nc **nats.Conn, ue *registry.OutcomeUnknownError) (bool, uint64, error) {
	if *nc == nil {
		c, err := rf.nats.connect(ctx, "jetway-cli")
		if err != nil {
			return false, 0, err
		}
		*nc = c
	}
	js, err := jetstream.New(*nc)
	if err != nil {
		return false, 0, err
	}
	return ue.Recheck(ctx, js)
}
