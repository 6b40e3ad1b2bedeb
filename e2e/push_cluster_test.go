package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/push/pushclient"
)

// One of three NATS nodes killed in the middle of a burst of publishes —
// the push stream's leader — loses no acknowledged message: every publish
// an edge answered with a sequence is then delivered, in order, with no
// duplicate, from an edge that followed the stream through the failover.
func TestPushSurvivesANATSNodeKilled(t *testing.T) {
	t.Parallel()
	servers, urls := natstest.RunCluster(t, 3, nil)
	admin := []string{"--nats", urls, "--replicas", "3"}
	if res := jetway(t, `{"name":"e2e.r3","publish":["w"],"subscribe":["r"]}`, append([]string{"topic", "put", "-"}, admin...)...); res.code != 0 {
		t.Fatalf("topic put: %d %s%s", res.code, res.stdout, res.stderr)
	}
	writer, reader := createAppKey(t, urls, "w"), createAppKey(t, urls, "r") // the buckets are R3 already
	edge := startNode(t, "edge", "edge", "", "--nats", urls)
	edge.waitReady(t)
	// The reader follows live from the start, on the same edge: its hub's
	// consumer rides through the failover too.
	var sub *pushclient.Subscription
	waitForFunc(t, func() error {
		p, err := pushclient.Pull(context.Background(), pushclient.Options{Edge: edge.edge, Topic: "e2e.r3", Header: http.Header{"X-Api-Key": {reader}}, From: "0"}, 1, 0)
		if err == nil && p == nil {
			err = fmt.Errorf("no answer")
		}
		return err
	})
	sub = pushclient.Subscribe(pushclient.Options{Edge: edge.edge, Topic: "e2e.r3", Transport: "ws", Header: http.Header{"X-Api-Key": {reader}}, From: "0"})
	defer sub.Close()

	// The stream's leader, to kill.
	nc, err := nats.Connect(urls)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, bus.PushDurable.Stream)
	if err != nil {
		t.Fatal(err)
	}
	info, _ := st.Info(ctx)
	if info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
		t.Fatalf("the push stream is not R3: %+v", info.Cluster)
	}
	leader := info.Cluster.Leader

	const total = 300
	var mu sync.Mutex
	acked := map[uint64]string{} // seq → data, answered 200
	failed := 0
	var wg sync.WaitGroup
	next := make(chan int)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				data := fmt.Sprint("m", i)
				r, err := do(http.MethodPost, edge.edge+"/_jetway/publish/e2e.r3", strings.NewReader(data), http.Header{"X-Api-Key": {writer}})
				mu.Lock()
				if err == nil && r.status == http.StatusOK {
					var seq uint64
					if _, err := fmt.Sscanf(strings.SplitN(string(r.body), `"seq":`, 2)[1], "%d", &seq); err == nil {
						acked[seq] = data
					}
				} else {
					failed++
				}
				mu.Unlock()
			}
		}()
	}
	for i := range total {
		if i == total/3 {
			for _, s := range servers {
				if s.Name() == leader {
					s.Shutdown() // mid-burst: the publishes in flight and after go to the new leader
				}
			}
		}
		next <- i
		time.Sleep(2 * time.Millisecond)
	}
	close(next)
	wg.Wait()
	t.Logf("%d publishes acknowledged, %d refused during the failover (leader %s killed)", len(acked), failed, leader)
	if len(acked) < total/2 {
		t.Fatalf("only %d of %d publishes acknowledged", len(acked), total)
	}
	// Every acknowledged message, in order, once.
	var last uint64
	got := 0
	for got < len(acked) {
		ev, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("after %d of %d acknowledged messages: %v", got, len(acked), err)
		}
		switch ev.Type {
		case "gap":
			t.Fatalf("gap: %+v", ev.Gap)
		case "message":
			if ev.Seq <= last {
				t.Fatalf("sequence %d after %d", ev.Seq, last)
			}
			last = ev.Seq
			if want, ok := acked[ev.Seq]; ok {
				if ev.Data != want {
					t.Fatalf("sequence %d is %q, acknowledged as %q", ev.Seq, ev.Data, want)
				}
				got++
			}
		}
	}
}
