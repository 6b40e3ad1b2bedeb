package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/internal/jetwaytest"
	"github.com/jetway-gw/jetway/push/pushclient"
)

// putTopic stores a push topic with `jetway topic put`.
func putTopic(t *testing.T, natsURL, doc string) {
	t.Helper()
	if res := jetway(t, doc, "topic", "put", "-", "--nats", natsURL); res.code != 0 {
		t.Fatalf("topic put: %d %s%s", res.code, res.stdout, res.stderr)
	}
}

// createAppKey creates an app (of no API: push only) with `jetway app
// create` and returns its key.
func createAppKey(t *testing.T, natsURL, id string) string {
	t.Helper()
	res := jetway(t, "", "app", "create", id, "--api", "none.*", "--nats", natsURL)
	m := keyRE.FindStringSubmatch(res.stdout)
	if res.code != 0 || m == nil {
		t.Fatalf("app create %s: %d %s%s", id, res.code, res.stdout, res.stderr)
	}
	return m[1]
}

// Push through real processes with every role as its own NATS user: a
// client reading over TCP from a second edge process that is killed with
// -9 in the middle of a burst resumes on the first (over SSE) with its
// cursor, and gets every message once, in order; messages published while
// it was away included.
func TestPushResumeAfterEdgeKilled(t *testing.T) {
	t.Parallel()
	srv, withUser := startAuthServe(t)
	admin := withUser("admin")
	putTopic(t, admin, `{"name":"e2e.news","publish":["e2e-writer"],"subscribe":["e2e-reader"]}`)
	writer, reader := createAppKey(t, admin, "e2e-writer"), createAppKey(t, admin, "e2e-reader")
	edge := startNode(t, "edge", "edge", "", "--nats", withUser("edge"), "--push-tcp-listen", "127.0.0.1:0")
	edge.waitReady(t)
	tcp := "tcp://" + edge.waitLog(t, startTimeout, `"push tcp listening"`, msgIs("push tcp listening")).str("addr")

	// Over HTTP, to the serve process's edge; the CLI publishes the last.
	publish := func(i int) {
		t.Helper()
		r, err := do(http.MethodPost, srv.edge+"/_jetway/publish/e2e.news", strings.NewReader(fmt.Sprint("m", i)), http.Header{"X-Api-Key": {writer}})
		if err != nil || r.status != http.StatusOK {
			t.Fatalf("publish %d: %v %v", i, r, err)
		}
	}
	// The reader's edge may not have the topic and app yet: retry the dial.
	var c *pushclient.Conn
	waitForFunc(t, func() error {
		var err error
		c, err = pushclient.Dial(context.Background(), pushclient.Options{Edge: tcp, Topic: "e2e.news", Transport: "tcp", Header: http.Header{"X-Api-Key": {reader}}, From: "0"})
		return err
	})
	// Reachable to the end: a connection nobody refers to any more is
	// closed by the garbage collector (the socket's finalizer), and the
	// edge would see it leave before the operators' commands list it.
	defer c.Close()
	got := map[int]bool{}
	last := ""
	read := func(c *pushclient.Conn, upTo int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for len(got) < upTo {
			ev, err := c.Next(ctx)
			if err != nil {
				t.Fatalf("reading after %d messages: %v", len(got), err)
			}
			if ev.Type != "message" {
				if ev.Type == "gap" {
					t.Fatalf("gap: %+v", ev.Gap)
				}
				continue
			}
			var i int
			if _, err := fmt.Sscanf(ev.Data, "m%d", &i); err != nil || got[i] || i != len(got) {
				t.Fatalf("message %q after %d in order (duplicate or hole)", ev.Data, len(got))
			}
			got[i], last = true, ev.Cursor
		}
	}
	for i := range 20 {
		publish(i)
	}
	read(c, 10) // half of the burst read; the rest in flight or queued
	// Acks, stored by the edge process as the edge's NATS user: a device
	// that acks what it printed goes on after it from any edge, over
	// SSE or a pull.
	if res := jetway(t, "", "push", "subscribe", "e2e.news", "--app-key", reader, "--edge", edge.edge, "--device", "d9", "--after", "ack", "--ack", "--count", "3"); res.code != 0 || res.stdout != "1 m0\n2 m1\n3 m2\n" {
		t.Fatalf("push subscribe --after ack --ack: %d %q %s", res.code, res.stdout, res.stderr)
	}
	if res := jetway(t, "", "push", "pull", "e2e.news", "--app-key", reader, "--edge", srv.edge, "--device", "d9", "--max", "2", "--ack"); res.code != 0 || res.stdout != "4 m3\n5 m4\n" {
		t.Fatalf("push pull --ack: %d %q %s", res.code, res.stdout, res.stderr)
	}
	if res := jetway(t, "", "push", "ack", "e2e.news", "2", "--app-key", reader, "--edge", edge.edge, "--device", "d9"); res.code != 0 || !strings.HasSuffix(strings.TrimSpace(res.stdout), ":5") {
		t.Fatalf("push ack of an earlier cursor: %d %q %s (the stored ack must stay at 5)", res.code, res.stdout, res.stderr)
	}
	// Every edge at once, over NATS as the admin: the reader's TCP
	// connection is on the edge process. The edge's own NATS user may
	// not ask (a kick would end every edge's connections).
	waitForFunc(t, func() error { // an edge that answers late is not listed: ask again
		if res := jetway(t, "", "push", "connections", "--cluster", "--nats", admin); res.code != 0 || !strings.Contains(res.stdout, "e2e-reader") || !strings.Contains(res.stdout, "tcp") {
			return fmt.Errorf("push connections --cluster: %d %s%s", res.code, res.stdout, res.stderr)
		}
		if res := jetway(t, "", "push", "stats", "--cluster", "--nats", admin); res.code != 0 || !strings.Contains(res.stdout, "total (2 edges)") {
			return fmt.Errorf("push stats --cluster: %d %s%s", res.code, res.stdout, res.stderr)
		}
		return nil
	})
	if res := jetway(t, "", "push", "kick", "e2e-reader", "--cluster", "--nats", withUser("edge")); res.code == 0 || !strings.Contains(res.stderr, "only the admin") {
		t.Errorf("push kick --cluster as the edge's user: %d %s%s", res.code, res.stdout, res.stderr)
	}
	edge.kill9(t)
	for i := 20; i < 30; i++ {
		publish(i) // while the client is away
	}
	c2, err := pushclient.Dial(context.Background(), pushclient.Options{Edge: srv.edge, Topic: "e2e.news", Transport: "sse", Header: http.Header{"X-Api-Key": {reader}}, After: last})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	read(c2, 30)
	// And live again, from the CLI, which prints the sequence.
	if res := jetway(t, "", "push", "publish", "e2e.news", "m30", "--app-key", writer, "--edge", srv.edge); res.code != 0 || strings.TrimSpace(res.stdout) != "31" {
		t.Fatalf("push publish: %d %q %s", res.code, res.stdout, res.stderr)
	}
	read(c2, 31)

	// The reader may not publish; an unknown key is refused before any stream.
	if res := jetway(t, "", "push", "publish", "e2e.news", "x", "--app-key", reader, "--edge", srv.edge); res.code == 0 || !strings.Contains(res.stderr, "403") {
		t.Errorf("reader published: %d %s%s", res.code, res.stdout, res.stderr)
	}
	// The edge's push counters, on /metrics and from the CLI.
	if r := get(t, srv.admin+"/metrics"); !strings.Contains(string(r.body), "jetway_push_delivered_total{") || !strings.Contains(string(r.body), "jetway_push_delivery_seconds_bucket{") {
		t.Errorf("/metrics has no push counters:\n%.2000s", r.body)
	}
	if res := jetway(t, "", "push", "stats", "--node", srv.admin); res.code != 0 || !strings.Contains(res.stdout, "connections    1") {
		t.Errorf("push stats: %d %s%s", res.code, res.stdout, res.stderr)
	}
	// An operator lists the edge's connections and ends the reader's.
	if res := jetway(t, "", "push", "connections", "--node", srv.admin); res.code != 0 || !strings.Contains(res.stdout, "e2e.news") || !strings.Contains(res.stdout, "e2e-reader") || !strings.Contains(res.stdout, "sse") {
		t.Errorf("push connections: %d %s%s", res.code, res.stdout, res.stderr)
	}
	if res := jetway(t, "", "push", "kick", "e2e-reader", "--node", srv.admin); res.code != 0 || !strings.Contains(res.stdout, "ended 1 connection(s)") {
		t.Errorf("push kick: %d %s%s", res.code, res.stdout, res.stderr)
	}
	func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for {
			ev, err := c2.Next(ctx)
			if err != nil {
				t.Fatalf("no close after the kick: %v", err)
			}
			if ev.Type == "close" {
				if !strings.Contains(ev.Reason, "operator") {
					t.Errorf("close: %+v", ev)
				}
				return
			}
		}
	}()
	// The kicked connection is counted by why, on /metrics and from the CLI.
	waitForFunc(t, func() error {
		if r := get(t, srv.admin+"/metrics"); !strings.Contains(string(r.body), `jetway_push_disconnects_total{node="`) || !strings.Contains(string(r.body), `,reason="kicked"} 1`) {
			return fmt.Errorf("/metrics has not the kick counted:\n%.3000s", r.body)
		}
		if res := jetway(t, "", "push", "stats", "--node", srv.admin); res.code != 0 || !strings.Contains(res.stdout, "kicked=1") {
			return fmt.Errorf("push stats: %d %s%s", res.code, res.stdout, res.stderr)
		}
		return nil
	})
	// The CLI subscriber prints "<seq> <data>" and exits after --count.
	res := jetway(t, "", "push", "subscribe", "e2e.news", "--app-key", reader, "--edge", srv.edge, "--from", "0", "--count", "2")
	if res.code != 0 || !strings.HasPrefix(res.stdout, "1 m0\n2 m1\n") {
		t.Errorf("push subscribe: %d %q %s", res.code, res.stdout, res.stderr)
	}
	pushGroupAsEdgeUser(t, admin, srv.edge, srv.edge, writer, reader)
	// A delivery receipt, asked for by the writer, read back from the CLI.
	res = jetway(t, "", "push", "publish", "e2e.news", "coupon", "--to", "device", "e2e-reader:d7", "--receipt", "--app-key", writer, "--edge", srv.edge)
	seq := strings.TrimSpace(res.stdout)
	if res.code != 0 || seq == "" {
		t.Fatalf("push publish --receipt: %d %q %s", res.code, res.stdout, res.stderr)
	}
	if res := jetway(t, "", "push", "subscribe", "e2e.news", "--app-key", reader, "--edge", srv.edge, "--device", "d7", "--from", seq, "--count", "1"); res.code != 0 || res.stdout != seq+" coupon\n" {
		t.Fatalf("push subscribe --device d7: %d %q %s", res.code, res.stdout, res.stderr)
	}
	waitForFunc(t, func() error {
		res := jetway(t, "", "push", "receipts", "e2e.news", seq, "--app-key", writer, "--edge", srv.edge)
		if res.code != 0 || !strings.Contains(res.stdout, "e2e-reader") || !strings.Contains(res.stdout, "d7") {
			return fmt.Errorf("push receipts: %d %q %s", res.code, res.stdout, res.stderr)
		}
		return nil
	})
}

// The serve process's push TCP listener over TLS, from the CLI: the
// subscriber gets what is kept, then exits after --count.
func TestPushOverTLSFromTheCLI(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := jetwaytest.NewCA(t)
	cf := ca.Issue(t, dir, 1, time.Now().Add(-time.Hour), time.Now().Add(time.Hour), "localhost")
	srv := startNode(t, "serve", "serve", "", "--tls-cert", cf.Cert, "--tls-key", cf.Key, "--push-tcp-listen", "127.0.0.1:0")
	srv.waitReady(t)
	addr := srv.waitLog(t, startTimeout, `"push tcp listening"`, msgIs("push tcp listening")).str("addr")
	_, port, _ := strings.Cut(addr, ":")
	tlsEdge := "tls://localhost:" + port
	_, httpsPort, _ := strings.Cut(strings.TrimPrefix(srv.edge, "http://"), ":")
	httpsEdge := "https://localhost:" + httpsPort
	if res := jetway(t, `{"name":"e2e.tls","publish":["w"],"subscribe":["r"]}`, "topic", "put", "-", "--nats", srv.natsURL); res.code != 0 {
		t.Fatalf("topic put: %d %s%s", res.code, res.stdout, res.stderr)
	}
	keys := []string{createAppKey(t, srv.natsURL, "w"), createAppKey(t, srv.natsURL, "r")}
	for _, m := range []string{"one", "two"} {
		waitForFunc(t, func() error {
			if res := jetway(t, "", "push", "publish", "e2e.tls", m, "--app-key", keys[0], "--edge", httpsEdge, "--tls-ca", ca.File(t, dir, "ca.pem")); res.code != 0 {
				return fmt.Errorf("push publish: %d %s%s", res.code, res.stdout, res.stderr)
			}
			return nil
		})
	}
	res := jetway(t, "", "push", "subscribe", "e2e.tls", "--transport", "tcp", "--app-key", keys[1], "--edge", tlsEdge, "--tls-ca", ca.File(t, dir, "ca.pem"), "--from", "0", "--count", "2")
	if res.code != 0 || res.stdout != "1 one\n2 two\n" {
		t.Errorf("push subscribe over TLS: %d %q %s", res.code, res.stdout, res.stderr)
	}
}

// pushGroupAsEdgeUser: a group member on an edge process whose NATS user
// is the edge's (least privilege) gets a message, acks it by its receipt,
// and a pull of the group finds nothing left; the consumer is the edge's
// to make.
func pushGroupAsEdgeUser(t *testing.T, admin, edgeURL, publishURL, writer, reader string) {
	t.Helper()
	if res := jetway(t, `{"name":"e2e.jobs","publish":["e2e-writer"],"subscribe":["e2e-reader"],"groups":{"names":["workers"]}}`, "topic", "put", "-", "--nats", admin); res.code != 0 {
		t.Fatalf("topic put: %d %s%s", res.code, res.stdout, res.stderr)
	}
	o := pushclient.Options{Edge: edgeURL, Topic: "e2e.jobs", Transport: "ws", Header: http.Header{"X-Api-Key": {reader}}, Group: "workers"}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var c *pushclient.Conn
	waitForFunc(t, func() error { // the edge may not have the topic yet
		var err error
		c, err = pushclient.Dial(ctx, o)
		return err
	})
	defer c.Close()
	if ev, err := c.Next(ctx); err != nil || ev.Type != "ready" {
		t.Fatalf("group member: %+v %v", ev, err)
	}
	waitForFunc(t, func() error {
		r, err := do(http.MethodPost, publishURL+"/_jetway/publish/e2e.jobs", strings.NewReader("job"), http.Header{"X-Api-Key": {writer}})
		if err == nil && r.status != http.StatusOK {
			err = fmt.Errorf("%d %s", r.status, r.body)
		}
		return err
	})
	ev, err := c.Next(ctx)
	if err != nil || ev.Data != "job" || ev.Receipt == "" {
		t.Fatalf("group message: %+v %v", ev, err)
	}
	// Given back (a nack the edge sends on its user's behalf): again at
	// once, not after the 30s ack wait.
	if err := c.Nack(ctx, ev.Receipt, 0); err != nil {
		t.Fatal(err)
	}
	if ev, err = c.Next(ctx); err != nil || ev.Data != "job" || ev.Attempt != 2 {
		t.Fatalf("after the nack: %+v %v", ev, err)
	}
	if err := c.AckReceipt(ctx, ev.Receipt); err != nil {
		t.Fatal(err)
	}
	c.Close()
	o.Transport = ""
	time.Sleep(200 * time.Millisecond) // the ack is on its way; a pull must not get the message again
	if p, err := pushclient.Pull(ctx, o, 0, 0); err != nil || len(p.Messages) != 0 {
		t.Fatalf("pull after the ack: %+v %v", p, err)
	}
	// From the CLI: a pull of the group prints the next job and acks it;
	// the one after finds nothing.
	if r, err := do(http.MethodPost, publishURL+"/_jetway/publish/e2e.jobs", strings.NewReader("job2"), http.Header{"X-Api-Key": {writer}}); err != nil || r.status != http.StatusOK {
		t.Fatalf("publish: %v %v", r, err)
	}
	for _, want := range []string{" job2\n", ""} {
		res := jetway(t, "", "push", "pull", "e2e.jobs", "--group", "workers", "--ack", "--app-key", reader, "--edge", edgeURL)
		if res.code != 0 || !strings.HasSuffix(res.stdout, want) || (want == "" && res.stdout != "") {
			t.Fatalf("push pull --group: %d %q %s (want %q)", res.code, res.stdout, res.stderr, want)
		}
	}
}

// A cluster-wide cap holds across edge processes, each its own NATS edge
// user: the app's connection on one edge is counted by the other, which
// refuses the next with 429 and Retry-After once the census (a second)
// has come; when it ends, the other admits again.
func TestPushClusterCapAcrossEdges(t *testing.T) {
	t.Parallel()
	_, withUser := startAuthServe(t)
	admin := withUser("admin")
	putTopic(t, admin, `{"name":"e2e.caps","publish":["e2e-capped"],"subscribe":["e2e-capped"]}`)
	key := createAppKey(t, admin, "e2e-capped")
	var edges [2]*node
	for i := range edges {
		edges[i] = startNode(t, fmt.Sprint("capped-edge", i), "edge", "", "--nats", withUser("edge"), "--push-cluster-max-conns-per-app", "1")
	}
	for _, e := range edges {
		e.waitReady(t)
	}
	dial := func(e *node) (*pushclient.Conn, error) {
		return pushclient.Dial(context.Background(), pushclient.Options{Edge: e.edge, Topic: "e2e.caps", Transport: "sse", Header: http.Header{"X-Api-Key": {key}}})
	}
	var c *pushclient.Conn
	waitForFunc(t, func() error { // the edge may not have the topic and app yet
		var err error
		c, err = dial(edges[0])
		return err
	})
	refusedOn := func(e *node) error {
		c2, err := dial(e)
		if err == nil {
			c2.Close()
			return errors.New("admitted")
		}
		var he *pushclient.HTTPError
		if !errors.As(err, &he) || he.Status != http.StatusTooManyRequests || he.RetryAfter == 0 || !strings.Contains(he.Message, "across the cluster") {
			return err
		}
		return nil
	}
	waitForFunc(t, func() error { return refusedOn(edges[1]) })
	c.Close()
	waitForFunc(t, func() error {
		c2, err := dial(edges[1])
		if err != nil {
			return err
		}
		c2.Close()
		return nil
	})
}

// `serve --demo` logs, beside its curl line for the demo topic, the CLI
// line that follows it over a WebSocket; run as logged, it prints the
// demo's messages.
func TestDemoPushOverWebSocket(t *testing.T) {
	srv := startNode(t, "serve", "serve", "", "--demo")
	line := srv.waitLog(t, startTimeout, `"demo push over WebSocket"`, func(l logLine) bool {
		return strings.HasPrefix(l.str("msg"), "demo push over WebSocket: ")
	}).str("msg")
	cmd, ok := strings.CutPrefix(line, "demo push over WebSocket: jetway ")
	if !ok || !strings.Contains(cmd, "--transport ws") || !strings.Contains(cmd, "--edge "+srv.edge) {
		t.Fatalf("the logged line: %q", line)
	}
	// The demo publishes every 5 s: the first message comes within that.
	res := jetway(t, "", append(strings.Fields(cmd), "--count", "1")...)
	if res.code != 0 || !strings.HasPrefix(res.stdout, "1 ") || !strings.Contains(res.stdout, `"n":1`) {
		t.Fatalf("%d %q %q", res.code, res.stdout, res.stderr)
	}
}
