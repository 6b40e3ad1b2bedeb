package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/push"
	"github.com/jetway-gw/jetway/push/pushclient"
)

const pushUsage = `Usage: jetway push <command> [flags] [args]

Commands:
  publish TOPIC DATA|-
                  publish one message (- reads stdin) and print its sequence:
                  through an edge as an app (--app-key), or on NATS as the
                  admin (--nats, no --app-key)
  subscribe TOPIC print one line per message, "<seq> <data>" (data with a line
                  break is quoted), and gaps on stderr; resumes by itself
                  after a dropped connection; exits after --count messages;
                  --ack acknowledges each message printed, so that the next
                  run with --after ack (on any edge) goes on after it
  pull TOPIC      print the messages after a cursor (--after; default: after
                  the last acked), at most --max, waiting up to --wait for
                  the first (HTTP long poll); --ack acknowledges them
  receipts TOPIC SEQ
                  the delivery receipts of a message the app (--app-key)
                  published with --receipt: app, device, user, transport, when
  ack TOPIC CURSOR
                  acknowledge every message up to CURSOR and print the ack
                  stored now (a later one stays: acks only move forward);
                  with --group, CURSOR is a receipt: ack that one message

Groups (--group NAME, a name in the topic's groups.names): each message for
the app goes to one member; subscribe (ws or tcp) and pull print it and, with
--ack, ack it by its receipt once printed; without --ack it comes again after
the topic's ack_wait.
  stats           an edge's push counters: connections, topics followed,
                  deliveries, catch-ups, write timeouts, refusals, acks, the
                  connections ended by why (--node)
  connections     an edge's push connections: topic, app, device, user,
                  transport, since, last sequence written (--node, --app)
  kick APP        end an app's push connections on an edge (--topic: of one
                  topic); its clients may come back: to keep it out, disable it
  With --cluster, stats, connections and kick ask every edge at once, over
  NATS as the admin (--nats): a row per edge, the connections of all.

Addressing (publish): --to app APP (the app's clients), --to device APP:DEVICE
(one device of the app), --to user APP:USER (the clients of the app whose
token's subject is USER); none: every subscriber.

Flags:
`

func cmdPush(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("jetway push", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rf := addRegistryFlags(fs)
	edgeURL := fs.String("edge", "http://127.0.0.1:8080", "the edge to publish through and subscribe at")
	appKey := fs.String("app-key", os.Getenv("JETWAY_APP_KEY"), "the app's API key (or JETWAY_APP_KEY)")
	var to toFlag
	fs.Var(&to, "to", "publish: app APP, device APP:DEVICE or user APP:USER (the value after --to is the kind, the next argument the address)")
	key := fs.String("key", "", "publish: the key a latest_only topic keeps the newest value of")
	idem := fs.String("idempotency-key", "", "publish: a retry with the same key is stored once")
	receipt := fs.Bool("receipt", false, "publish (with --to device or user): store a delivery receipt of each write to a client (jetway push receipts)")
	from := fs.String("from", "", "subscribe: the first sequence wanted ([EPOCH:]SEQ; 0: everything kept); default live only")
	after := fs.String("after", "", "subscribe, pull: the cursor of the last message had ([EPOCH:]SEQ), or ack: after the last acknowledged")
	ackEach := fs.Bool("ack", false, "subscribe, pull: acknowledge the messages printed")
	group := fs.String("group", "", "subscribe, pull, ack: consume as a member of the app's group of this name")
	prefetch := fs.Int("prefetch", 0, "subscribe --group: unacked messages the connection holds (1 to 100; default 10)")
	pullMax := fs.Int("max", 0, "pull: at most this many messages (1 to 1000; default 100)")
	pullWait := fs.Duration("wait", 0, "pull: wait up to this long for the first message (up to 60s; default: answer at once)")
	transport := fs.String("transport", "sse", "subscribe: sse, ws or tcp (tcp: --edge is the edge's --push-tcp-listen, tcp://HOST:PORT or tls://HOST:PORT)")
	device := fs.String("device", "", "subscribe, pull, ack: the device this client is (messages to it are delivered too; its acks are its own)")
	count := fs.Int("count", 0, "subscribe: exit after this many messages (0: until interrupted)")
	tlsCA := fs.String("tls-ca", "", "publish, subscribe: PEM CA file to verify an https:// or tls:// edge with (default: the system's roots)")
	nodeURL := fs.String("node", "http://127.0.0.1:8081", "stats, connections, kick: the edge's admin listener (its --admin)")
	adminToken := fs.String("admin-token", os.Getenv("JETWAY_ADMIN_TOKEN"), "stats, connections, kick: the admin listener's token, if it has one (env JETWAY_ADMIN_TOKEN)")
	onlyApp := fs.String("app", "", "connections: only this app's")
	kickTopic := fs.String("topic", "", "kick: only the connections of this topic")
	cluster := fs.Bool("cluster", false, "stats, connections, kick: every edge, asked over NATS as the admin (--nats), not one edge's admin listener (--node)")
	fs.Usage = func() { groupUsage(stderr, fs, "push", pushUsage, args) }
	args = to.take(args)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if to.err != nil {
		return fmt.Errorf("%w: %v", errUsage, to.err)
	}
	if err := checkSubcommand(fs, "push", pos, map[string]int{"publish": 2, "subscribe": 1, "pull": 1, "ack": 2, "receipts": 2, "stats": 0, "connections": 0, "kick": 1}); err != nil {
		return err
	}
	node := nodeClient{url: strings.TrimSuffix(*nodeURL, "/"), token: *adminToken, timeout: *rf.timeout}
	var tlsConfig *tls.Config // nil: the system's roots
	if *tlsCA != "" {
		pool, err := bus.LoadCertPool(*tlsCA)
		if err != nil {
			return fmt.Errorf("%w: --tls-ca: %v", errUsage, err)
		}
		tlsConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig, Proxy: http.ProxyFromEnvironment}}
	if *cluster {
		switch pos[0] {
		case "stats", "connections", "kick":
			q := push.Query{Op: pos[0], App: *onlyApp, Topic: *kickTopic}
			if pos[0] == "kick" {
				if err := bus.ValidName(pos[1]); err != nil {
					return fmt.Errorf("%w: app id %q: %v", errUsage, pos[1], err)
				}
				q.App = pos[1]
			}
			return pushCluster(rf, q, stdout, stderr)
		}
		return fmt.Errorf("%w: --cluster goes with stats, connections and kick", errUsage)
	}
	switch pos[0] {
	case "stats":
		return pushStats(node, stdout)
	case "connections":
		return pushConnections(node, *onlyApp, stdout)
	case "kick":
		if err := bus.ValidName(pos[1]); err != nil {
			return fmt.Errorf("%w: app id %q: %v", errUsage, pos[1], err)
		}
		return pushKick(node, pos[1], *kickTopic, stdout)
	}
	if err := bus.ValidName(pos[1]); err != nil {
		return fmt.Errorf("%w: topic name %q: %v", errUsage, pos[1], err)
	}
	if *group != "" && !slices.Contains(given(fs), "transport") {
		*transport = "ws" // a group acks each message: not over SSE
	}
	po := pushclient.Options{Edge: *edgeURL, Topic: pos[1], Transport: *transport, TLSConfig: tlsConfig, HTTPClient: hc,
		Header: http.Header{"X-Api-Key": {*appKey}}, Device: *device, After: *after, From: *from, Group: *group, Prefetch: *prefetch}
	switch pos[0] {
	case "subscribe":
		if *transport == "tcp" && !strings.HasPrefix(*edgeURL, "tcp://") && !strings.HasPrefix(*edgeURL, "tls://") {
			return fmt.Errorf("%w: --transport tcp: --edge is the edge's push TCP listener, tcp://HOST:PORT or tls://HOST:PORT, not %q", errUsage, *edgeURL)
		}
		return pushSubscribe(po, *count, *ackEach, stdout, stderr)
	case "pull":
		if *pullMax < 0 || *pullMax > push.MaxPullMessages || *pullWait < 0 || *pullWait > push.MaxPullWait {
			return fmt.Errorf("%w: --max is 1 to %d, --wait up to %s", errUsage, push.MaxPullMessages, push.MaxPullWait)
		}
		return pushPull(po, *pullMax, *pullWait, *ackEach, *rf.timeout, stdout, stderr)
	case "receipts":
		seq, err := strconv.ParseUint(pos[2], 10, 64)
		if err != nil || seq == 0 {
			return fmt.Errorf("%w: SEQ is the sequence push publish printed", errUsage)
		}
		ctx, cancel := context.WithTimeout(context.Background(), *rf.timeout)
		defer cancel()
		rs, err := pushclient.Receipts(ctx, po, seq)
		if err != nil {
			return fmt.Errorf("push receipts: %w", err)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "APP\tDEVICE\tUSER\tTRANSPORT\tAT")
		for _, r := range rs {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.App, orDashS(r.Device), orDashS(r.User), r.Transport, r.At.UTC().Format(time.RFC3339Nano))
		}
		return tw.Flush()
	case "ack":
		ctx, cancel := context.WithTimeout(context.Background(), *rf.timeout)
		defer cancel()
		if *group != "" {
			if err := pushclient.AckGroup(ctx, po, []string{pos[2]}, nil, 0); err != nil {
				return fmt.Errorf("push ack: %w", err)
			}
			fmt.Fprintln(stdout, "acked", pos[2])
			return nil
		}
		acked, err := pushclient.Ack(ctx, po, pos[2])
		if err != nil {
			return fmt.Errorf("push ack: %w", err)
		}
		fmt.Fprintln(stdout, acked)
		return nil
	}
	var data []byte
	if pos[2] == "-" {
		if data, err = io.ReadAll(io.LimitReader(stdin, 1<<20+1)); err != nil {
			return err
		}
	} else {
		data = []byte(pos[2])
	}
	m := push.Message{To: to.kind, App: to.app, ID: to.id, Key: *key, Data: data, IdempotencyKey: *idem, Receipt: *receipt}
	if *appKey == "" {
		return publishNATS(rf, pos[1], m, stdout)
	}
	return publishEdge(hc, *edgeURL, *appKey, pos[1], m, *rf.timeout, stdout)
}

// toFlag is --to KIND ADDRESS: two arguments, taken off args before the
// flags are parsed.
type toFlag struct {
	kind, app, id string
	err           error
}

func (f *toFlag) String() string { return f.kind }
func (f *toFlag) Set(string) error {
	return errors.New("--to takes two arguments: app APP, device APP:DEVICE or user APP:USER")
}

// take removes "--to KIND ADDRESS" (or "-to") from args.
func (f *toFlag) take(args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		if args[i] != "--to" && args[i] != "-to" {
			out = append(out, args[i])
			continue
		}
		if i+2 >= len(args) {
			f.err = errors.New("--to takes two arguments: app APP, device APP:DEVICE or user APP:USER")
			return out
		}
		kind, addr := args[i+1], args[i+2]
		i += 2
		switch kind {
		case "app":
			f.kind, f.app = "app", addr
		case "device":
			app, dev, ok := strings.Cut(addr, ":")
			if !ok || app == "" || dev == "" {
				f.err = fmt.Errorf("--to device %q: give APP:DEVICE", addr)
			}
			f.kind, f.app, f.id = "device", app, dev
		case "user":
			app, user, ok := strings.Cut(addr, ":")
			if !ok || app == "" || user == "" {
				f.err = fmt.Errorf("--to user %q: give APP:USER (USER: the subject of the app's users' tokens)", addr)
			}
			f.kind, f.app, f.id = "user", app, user
		default:
			f.err = fmt.Errorf("--to %q: app, device or user", kind)
		}
	}
	return out
}

// publishEdge publishes through an edge as the app whose key is given.
func publishEdge(hc *http.Client, edge, key, topic string, m push.Message, timeout time.Duration, stdout io.Writer) error {
	q := url.Values{}
	idParam := "device"
	if m.To == "user" {
		idParam = "user"
	}
	for k, v := range map[string]string{"to": m.To, "app": m.App, idParam: m.ID, "key": m.Key} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if m.Receipt {
		q.Set("receipt", "1")
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(edge, "/")+"/_jetway/publish/"+topic+"?"+q.Encode(), bytes.NewReader(m.Data))
	if err != nil {
		return err
	}
	req.Header.Set("X-Api-Key", key)
	if m.IdempotencyKey != "" {
		req.Header.Set("Idempotency-Key", m.IdempotencyKey)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("publishing: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusAccepted {
		var e struct{ Code, Message string }
		_ = json.Unmarshal(b, &e)
		return fmt.Errorf("publishing: %d %s: %s", resp.StatusCode, e.Code, e.Message)
	}
	var p push.Published
	if err := json.Unmarshal(b, &p); err != nil {
		return fmt.Errorf("publishing: the edge answered %q", b)
	}
	printPublished(stdout, p)
	return nil
}

func printPublished(w io.Writer, p push.Published) {
	switch {
	case !p.Stored:
		fmt.Fprintln(w, "sent (best_effort: not waited for)")
	case p.Duplicate:
		fmt.Fprintf(w, "%d (a duplicate of it: stored once)\n", p.Seq)
	default:
		fmt.Fprintf(w, "%d\n", p.Seq)
	}
}

// publishNATS publishes on NATS as the admin.
func publishNATS(rf registryFlags, topic string, m push.Message, stdout io.Writer) error {
	ctx, c, js, done, err := rf.dialJS(1)
	if err != nil {
		return err
	}
	defer done()
	t, err := c.GetTopic(ctx, topic)
	if err != nil {
		return err
	}
	p, err := push.Publish(ctx, js, t, "", m)
	if err != nil {
		return err
	}
	if p.Stored {
		// An async publish must reach the server before the connection
		// closes; a stored one has.
		printPublished(stdout, p)
		return nil
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return ctx.Err()
	}
	printPublished(stdout, p)
	return nil
}

// nodeClient asks one node's admin listener.
type nodeClient struct {
	url, token string
	timeout    time.Duration
}

// do sends a request to the node and decodes its JSON answer into out.
func (c nodeClient) do(method, path string, body []byte, out any) error {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, c.url+path, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%w: --node %q: %v", errUsage, c.url, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %d: %s", c.url+path, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s answered %.200q", c.url+path, b)
	}
	return nil
}

// pushConnections prints an edge's push connections.
func pushConnections(node nodeClient, app string, stdout io.Writer) error {
	var out struct{ Connections []push.Conn }
	if err := node.do(http.MethodGet, "/push/connections?app="+url.QueryEscape(app), nil, &out); err != nil {
		return fmt.Errorf("push connections: %w", err)
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tAPP\tDEVICE\tUSER\tTRANSPORT\tSINCE\tSEQ\tLAG")
	for _, c := range out.Connections {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\n", c.Topic, c.App, orDashS(c.Device), orDashS(c.User), c.Transport, c.Since.UTC().Format(time.RFC3339), c.Seq, c.Lag)
	}
	return tw.Flush()
}

func orDashS(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// pushKick ends an app's connections on an edge.
func pushKick(node nodeClient, app, topic string, stdout io.Writer) error {
	body, _ := json.Marshal(map[string]string{"app": app, "topic": topic})
	var out struct{ Kicked int }
	if err := node.do(http.MethodPost, "/push/kick", body, &out); err != nil {
		return fmt.Errorf("push kick: %w", err)
	}
	fmt.Fprintf(stdout, "ended %d connection(s) of app %s on %s\n", out.Kicked, app, node.url)
	return nil
}

// pushCluster asks every edge over NATS and prints their answers: a row
// per edge (and the totals) for stats, the connections of every edge, or
// what a kick ended.
func pushCluster(rf registryFlags, q push.Query, stdout, stderr io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), *rf.timeout)
	defer cancel()
	nc, err := rf.nats.connect(ctx, "jetway-cli")
	if err != nil {
		return err
	}
	defer nc.Close()
	answers, missing, err := push.Ask(ctx, nc, q)
	if err != nil {
		return fmt.Errorf("push %s --cluster: %w", q.Op, err)
	}
	if len(answers) == 0 {
		if err := nc.LastError(); err != nil {
			return fmt.Errorf("push %s --cluster: %w (only the admin may ask the edges)", q.Op, err)
		}
		if len(missing) == 0 {
			return fmt.Errorf("push %s --cluster: no edge answered", q.Op)
		}
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	var failed []string
	for _, a := range answers {
		if a.Error != "" {
			failed = append(failed, a.Edge+": "+a.Error)
		}
	}
	switch q.Op {
	case "stats":
		fmt.Fprintln(tw, "EDGE\tCONNECTIONS\tTOPICS\tDELIVERED\tREPLAYED\tCATCH-UPS\tWRITE-TIMEOUTS\tREFUSED\tACKS")
		var t push.Stats
		row := func(name string, s push.Stats) {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", name, s.Connections, s.Topics, s.Delivered, s.Replayed, s.CatchUps, s.WriteTimeouts, s.Refused, s.Acks)
		}
		for _, a := range answers {
			if s := a.Stats; s != nil {
				row(a.Edge, *s)
				t.Connections, t.Topics, t.Delivered, t.Replayed = t.Connections+s.Connections, t.Topics+s.Topics, t.Delivered+s.Delivered, t.Replayed+s.Replayed
				t.CatchUps, t.WriteTimeouts, t.Refused, t.Acks = t.CatchUps+s.CatchUps, t.WriteTimeouts+s.WriteTimeouts, t.Refused+s.Refused, t.Acks+s.Acks
			}
		}
		row(fmt.Sprintf("total (%d edges)", len(answers)), t)
	case "connections":
		fmt.Fprintln(tw, "EDGE\tTOPIC\tAPP\tDEVICE\tUSER\tTRANSPORT\tSINCE\tSEQ\tLAG")
		for _, a := range answers {
			for _, c := range a.Connections {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\n", a.Edge, c.Topic, c.App, orDashS(c.Device), orDashS(c.User), c.Transport, c.Since.UTC().Format(time.RFC3339), c.Seq, c.Lag)
			}
			if a.Total > len(a.Connections) {
				fmt.Fprintf(stderr, "edge %s: %d of its %d connections listed\n", a.Edge, len(a.Connections), a.Total)
			}
		}
	case "kick":
		n := 0
		for _, a := range answers {
			n += a.Kicked
		}
		fmt.Fprintf(tw, "ended %d connection(s) of app %s on %d edge(s)\n", n, q.App, len(answers))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// What some edges said is printed; the command fails when any edge
	// refused the question or did not answer.
	switch {
	case len(failed) > 0:
		return fmt.Errorf("push %s --cluster: %s", q.Op, strings.Join(failed, "; "))
	case len(missing) > 0:
		return fmt.Errorf("push %s --cluster: edge(s) %s beat but did not answer within --timeout %s", q.Op, strings.Join(missing, ", "), *rf.timeout)
	}
	return nil
}

// pushStats prints an edge's push counters from its admin listener.
func pushStats(node nodeClient, stdout io.Writer) error {
	var st push.Stats
	if err := node.do(http.MethodGet, "/push", nil, &st); err != nil {
		return fmt.Errorf("push stats: %w", err)
	}
	fmt.Fprintf(stdout, "connections    %d\ntopics         %d\ndelivered      %d\nreplayed       %d\ncatch-ups      %d\nwrite timeouts %d\nrefused        %d\nacks           %d\nack errors     %d\n",
		st.Connections, st.Topics, st.Delivered, st.Replayed, st.CatchUps, st.WriteTimeouts, st.Refused, st.Acks, st.AckErrors)
	// The ended connections by why, those there were.
	var ends []string
	for _, why := range slices.Sorted(maps.Keys(st.Disconnects)) {
		if n := st.Disconnects[why]; n > 0 {
			ends = append(ends, fmt.Sprintf("%s=%d", why, n))
		}
	}
	if len(ends) > 0 {
		fmt.Fprintf(stdout, "disconnects    %s\n", strings.Join(ends, " "))
	}
	return nil
}

// pushPull prints the messages of one pull, and acks them when asked.
func pushPull(o pushclient.Options, max int, wait time.Duration, ack bool, timeout time.Duration, stdout, stderr io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), wait+timeout)
	defer cancel()
	p, err := pushclient.Pull(ctx, o, max, wait)
	if err != nil {
		return fmt.Errorf("push pull: %w", err)
	}
	for _, g := range p.Gaps {
		printGap(stderr, g)
	}
	for _, m := range p.Messages {
		printMessage(stdout, m.Cursor, m.Data)
	}
	if ack && o.Group != "" && len(p.Messages) > 0 {
		receipts := make([]string, len(p.Messages))
		for i, m := range p.Messages {
			receipts[i] = m.Receipt
		}
		if err := pushclient.AckGroup(ctx, o, receipts, nil, 0); err != nil {
			return fmt.Errorf("push pull: acknowledging: %w", err)
		}
		return nil
	}
	if ack && o.Group == "" && len(p.Messages)+len(p.Gaps) > 0 {
		if _, err := pushclient.Ack(ctx, o, p.Cursor); err != nil {
			return fmt.Errorf("push pull: acknowledging %s: %w", p.Cursor, err)
		}
	}
	return nil
}

// printMessage prints "<seq> <data>", data quoted when it has a line
// break.
func printMessage(w io.Writer, cursor, data string) {
	if strings.ContainsAny(data, "\r\n") {
		data = strconv.Quote(data)
	}
	_, seq, _ := strings.Cut(cursor, ":")
	fmt.Fprintf(w, "%s %s\n", seq, data)
}

func printGap(w io.Writer, g pushclient.Gap) {
	fmt.Fprintf(w, "gap: %s (asked %s; going on after %s)\n", g.Reason, g.Asked, g.Resume)
}

// pushSubscribe prints messages until count (0: until interrupted), each
// acked after it is printed when ack is set.
func pushSubscribe(o pushclient.Options, count int, ack bool, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	sub := pushclient.Subscribe(o)
	defer func() { _ = sub.Close() }()
	for n := 0; count == 0 || n < count; {
		ev, err := sub.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		switch ev.Type {
		case "message":
			printMessage(stdout, ev.Cursor, ev.Data)
			n++
			// An ack that does not get through costs a redelivery, not
			// the subscription: say so and go on.
			if ack && ev.Receipt != "" {
				if err := sub.AckReceipt(ctx, ev.Receipt); err != nil {
					fmt.Fprintf(stderr, "acknowledging %s: %v (it comes again after the group's ack_wait)\n", ev.Receipt, err)
				}
			} else if ack {
				if err := sub.Ack(ctx, ev.Cursor); err != nil {
					fmt.Fprintf(stderr, "acknowledging %s: %v (it comes again on the next --after ack)\n", ev.Cursor, err)
				}
			}
		case "gap":
			printGap(stderr, *ev.Gap)
		case "close":
			fmt.Fprintf(stderr, "the edge closed the connection: %s; reconnecting\n", ev.Reason)
		}
	}
	return nil
}
