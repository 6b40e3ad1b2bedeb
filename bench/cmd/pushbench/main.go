// Command pushbench measures Jetway's push side from the client's side of
// the wire: it holds WebSocket subscribers on an edge, publishes, and
// reports throughput and latency. bench/push.sh runs it against `jetway
// serve` pinned to one core, itself on the other.
//
//	pushbench conns     --edge URL --key K --topic T --n 15000 --pid PID
//	    opens n idle subscriptions as fast as it can (new authenticated
//	    connections per second), then the server's resident memory per
//	    connection (VmRSS of --pid, before and after)
//	pushbench broadcast --edge URL --key K --topic T --nats URL --subs 10000 --msgs 200 [--rate 10] [--slow 1]
//	    subs subscribers, msgs messages of 100 bytes published on NATS at
//	    rate a second (0: as fast as the stream takes them): deliveries per
//	    second and the p50/p99 of publish → receipt; --slow N adds N
//	    subscribers that never read
//	pushbench unique    --edge URL --key K --pubkey K --topic T --devices 100 --rate 10000 --for 10s
//	    devices subscribers, each message HTTP-published to one of them at
//	    rate (0: as fast as 64 publishers go): messages per second delivered
//	    and the p99 of publish → receipt
//	pushbench resume    --edge URL --key K --pubkey K --topic T --missed 100 --rounds 50
//	    a client misses 100 messages, reconnects with its cursor: the p50/p99
//	    of connect → the last missed message
//
// Subscribers are WebSocket ones, or with --transport tcp --tcp ADDR of
// the edge's push TCP listener.
//
// Each message's data is "t=<unix nanos of its publish> …", which the
// subscriber reads for the latency; clocks are one machine's.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coder/websocket"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

var (
	edge    = flag.String("edge", "http://127.0.0.1:8080", "the edge")
	key     = flag.String("key", "", "a subscribing app's API key")
	pubKey  = flag.String("pubkey", "", "a publishing app's API key (unique, resume)")
	topic   = flag.String("topic", "bench", "the topic")
	natsURL = flag.String("nats", "nats://127.0.0.1:4222", "NATS, as the admin (broadcast publishes there)")
	n       = flag.Int("n", 15000, "conns: connections")
	pid     = flag.Int("pid", 0, "conns: the server's pid (its VmRSS)")
	subs    = flag.Int("subs", 10000, "broadcast: subscribers")
	msgs    = flag.Int("msgs", 200, "broadcast: messages")
	slow    = flag.Int("slow", 0, "broadcast: subscribers that never read")
	size    = flag.Int("size", 100, "message size in bytes")
	devices = flag.Int("devices", 100, "unique: subscribers, one device each")
	rate    = flag.Int("rate", 0, "broadcast, unique: messages per second (0: as fast as it goes)")
	dur     = flag.Duration("for", 10*time.Second, "unique: how long to publish")
	batch   = flag.Int("batch", 1, "unique: messages per HTTP publish (more than 1: POST …/batch)")
	missed  = flag.Int("missed", 100, "resume: messages missed")
	rounds  = flag.Int("rounds", 50, "resume: rounds")
	over    = flag.String("transport", "ws", "ws, or tcp (to --tcp)")
	tcpAddr = flag.String("tcp", "127.0.0.1:8090", "the edge's push TCP listener (--push-tcp-listen), for --transport tcp")
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: pushbench conns|broadcast|unique|resume [flags]")
		os.Exit(2)
	}
	mode := os.Args[1]
	_ = flag.CommandLine.Parse(os.Args[2:])
	var err error
	switch mode {
	case "conns":
		err = benchConns()
	case "broadcast":
		err = benchBroadcast()
	case "unique":
		err = benchUnique()
	case "resume":
		err = benchResume()
	default:
		err = fmt.Errorf("unknown mode %q", mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pushbench:", err)
		os.Exit(1)
	}
}

func wsURL(query string) string {
	return "ws" + strings.TrimPrefix(*edge, "http") + "/_jetway/ws/" + *topic + query
}

// sub is a subscription over either transport: Read returns the next
// frame (WebSocket: objects one per line; TCP: one object).
type sub interface {
	Read(ctx context.Context) ([]byte, error)
	CloseNow() error
}

type wsSub struct{ *websocket.Conn }

func (s wsSub) Read(ctx context.Context) ([]byte, error) {
	_, b, err := s.Conn.Read(ctx)
	return b, err
}

// tcpSub reads frames of the push TCP transport; a ping is answered and
// not returned. ctx is not watched: CloseNow ends a read.
type tcpSub struct {
	c  net.Conn
	rd *bufio.Reader
}

func (s *tcpSub) Read(context.Context) ([]byte, error) {
	for {
		var n [4]byte
		if _, err := io.ReadFull(s.rd, n[:]); err != nil {
			return nil, err
		}
		b := make([]byte, binary.BigEndian.Uint32(n[:]))
		if _, err := io.ReadFull(s.rd, b); err != nil {
			return nil, err
		}
		if !bytes.Equal(b, []byte(`{"type":"ping"}`)) {
			return b, nil
		}
		if _, err := s.c.Write(frame(`{"type":"pong"}`)); err != nil {
			return nil, err
		}
	}
}

func (s *tcpSub) CloseNow() error { return s.c.Close() }

func frame(obj string) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(obj))), obj...)
}

// dial opens a subscription and reads its ready frame.
func dial(ctx context.Context, query string) (sub, error) {
	s, _, err := dialFirst(ctx, query)
	return s, err
}

// dialFirst is dial, returning the first frame too (over WebSocket,
// messages may share it with ready).
func dialFirst(ctx context.Context, query string) (sub, []byte, error) {
	var s sub
	if *over == "tcp" {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", *tcpAddr)
		if err != nil {
			return nil, nil, err
		}
		hello, _ := json.Marshal(map[string]any{"type": "connect", "path": "/_jetway/tcp/" + *topic + query, "headers": map[string]string{"X-Api-Key": *key}})
		if _, err := c.Write(frame(string(hello))); err != nil {
			_ = c.Close()
			return nil, nil, err
		}
		s = &tcpSub{c: c, rd: bufio.NewReaderSize(c, 16<<10)}
	} else {
		c, _, err := websocket.Dial(ctx, wsURL(query), &websocket.DialOptions{HTTPHeader: http.Header{"X-Api-Key": {*key}}})
		if err != nil {
			return nil, nil, err
		}
		c.SetReadLimit(16 << 20)
		s = wsSub{c}
	}
	b, err := s.Read(ctx)
	if err != nil || !bytes.Contains(b, []byte(`"type":"ready"`)) {
		_ = s.CloseNow()
		return nil, nil, fmt.Errorf("no ready frame: %q %v", b, err)
	}
	return s, b, nil
}

// dialMany opens count subscriptions, 256 at a time.
func dialMany(ctx context.Context, count int, query func(i int) string) ([]sub, time.Duration, error) {
	out := make([]sub, count)
	sem := make(chan struct{}, 256)
	var first error
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for i := range count {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			var c sub
			var err error
			for try := 0; try < 5; try++ {
				if c, err = dial(ctx, query(i)); err == nil {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil && first == nil {
				first = fmt.Errorf("connection %d: %w", i, err)
			}
			out[i] = c
		}()
	}
	wg.Wait()
	return out, time.Since(start), first
}

func rss(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for %d", pid)
}

func benchConns() error {
	ctx := context.Background()
	before, err := rss(*pid)
	if err != nil {
		return err
	}
	conns, took, err := dialMany(ctx, *n, func(int) string { return "" })
	if err != nil {
		return err
	}
	time.Sleep(5 * time.Second)
	after, err := rss(*pid)
	if err != nil {
		return err
	}
	fmt.Printf("push-conns conns=%d connect_per_s=%.0f rss_before_mib=%.1f rss_after_mib=%.1f per_conn_bytes=%.0f\n",
		len(conns), float64(len(conns))/took.Seconds(), float64(before)/(1<<20), float64(after)/(1<<20), float64(after-before)/float64(len(conns)))
	for _, c := range conns {
		_ = c.CloseNow()
	}
	return nil
}

// stamp is a message's data: its publish time and padding to size.
func stamp(extra string) []byte {
	b := []byte("t=" + strconv.FormatInt(time.Now().UnixNano(), 10) + " " + extra)
	for len(b) < *size {
		b = append(b, 'x')
	}
	return b
}

// latencies collects publish → receipt times.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) { l.mu.Lock(); l.d = append(l.d, d); l.mu.Unlock() }

func (l *latencies) pct(p float64) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.d) == 0 {
		return 0
	}
	slices.Sort(l.d)
	return l.d[min(len(l.d)-1, int(float64(len(l.d))*p))]
}

// readAll reads a subscription's frames, counting messages and timing a
// sample of them (every 16th), until ctx ends.
func readAll(ctx context.Context, c sub, got *atomic.Int64, lat *latencies, sample bool) {
	var seen int
	for {
		b, err := c.Read(ctx)
		if err != nil {
			return
		}
		now := time.Now().UnixNano()
		for len(b) > 0 {
			line := b
			if i := bytes.IndexByte(b, '\n'); i >= 0 {
				line, b = b[:i], b[i+1:]
			} else {
				b = nil
			}
			i := bytes.Index(line, []byte(`"data":"t=`))
			if i < 0 {
				continue
			}
			got.Add(1)
			seen++
			if !sample && seen%16 != 0 {
				continue
			}
			rest := line[i+len(`"data":"t=`):]
			if j := bytes.IndexByte(rest, ' '); j > 0 {
				if t, err := strconv.ParseInt(string(rest[:j]), 10, 64); err == nil {
					lat.add(time.Duration(now - t))
				}
			}
		}
	}
}

func benchBroadcast() error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	conns, took, err := dialMany(ctx, *subs, func(int) string { return "" })
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "%d subscribers in %v\n", len(conns), took.Round(time.Millisecond))
	stalled, _, err := dialMany(ctx, *slow, func(int) string { return "" })
	if err != nil {
		return err
	}
	var got atomic.Int64
	lat := &latencies{}
	for _, c := range conns {
		go readAll(ctx, c, &got, lat, false)
	}
	nc, err := nats.Connect(*natsURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	subject := "jetway.push." + strings.ReplaceAll(*topic, ".", ":") + ".all._._._"
	want := int64(*msgs) * int64(len(conns))
	serverCPU, selfCPU := cpu(*pid), cpu(0)
	var tick <-chan time.Time
	if *rate > 0 {
		t := time.NewTicker(time.Second / time.Duration(*rate))
		defer t.Stop()
		tick = t.C
	}
	start := time.Now()
	for i := range *msgs {
		if tick != nil {
			<-tick
		}
		m := nats.NewMsg(subject)
		m.Data = stamp(strconv.Itoa(i))
		m.Header.Set("Nats-TTL", "300s")
		if _, err := js.PublishMsgAsync(m); err != nil {
			return err
		}
		if i%50 == 49 {
			<-js.PublishAsyncComplete()
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for got.Load() < want && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	el := time.Since(start)
	fmt.Printf("push-broadcast subs=%d slow=%d msgs=%d rate=%d delivered=%d/%d deliveries_per_s=%.0f p50_ms=%.1f p99_ms=%.1f %s\n",
		len(conns), len(stalled), *msgs, *rate, got.Load(), want, float64(got.Load())/el.Seconds(),
		ms(lat.pct(0.5)), ms(lat.pct(0.99)), usage(serverCPU, selfCPU, el))
	for _, c := range append(conns, stalled...) {
		_ = c.CloseNow()
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// cpu is the CPU time of a process (utime + stime), or of this one for
// pid 0.
func cpu(pid int) time.Duration {
	if pid == 0 {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	k, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+k) * 10 * time.Millisecond // USER_HZ = 100
}

// usage reports the server's and this process's CPU over a run, as a
// share of one core.
func usage(serverBefore, selfBefore time.Duration, el time.Duration) string {
	return fmt.Sprintf("server_cpu=%.0f%% client_cpu=%.0f%%", 100*float64(cpu(*pid)-serverBefore)/float64(el), 100*float64(cpu(0)-selfBefore)/float64(el))
}

// publisher posts messages through the edge.
var publisher = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: 10 * time.Second}

func post(query string, data []byte) (string, error) {
	req, _ := http.NewRequest(http.MethodPost, *edge+"/_jetway/publish/"+*topic+query, bytes.NewReader(data))
	req.Header.Set("X-Api-Key", *pubKey)
	resp, err := publisher.Do(req)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("publish: %d %s", resp.StatusCode, b)
	}
	var p struct{ Cursor string }
	err = json.Unmarshal(b, &p)
	return p.Cursor, err
}

// postBatch publishes *batch messages, each to one device, in one POST;
// it returns how many were stored.
func postBatch(i int) (int, error) {
	type msg struct {
		Data   string `json:"data"`
		To     string `json:"to"`
		App    string `json:"app"`
		Device string `json:"device"`
	}
	ms := make([]msg, *batch)
	for j := range ms {
		ms[j] = msg{Data: string(stamp("")), To: "device", App: "bench-reader", Device: "d" + strconv.Itoa((i**batch+j)%*devices)}
	}
	body, _ := json.Marshal(map[string]any{"messages": ms})
	req, _ := http.NewRequest(http.MethodPost, *edge+"/_jetway/publish/"+*topic+"/batch", bytes.NewReader(body))
	req.Header.Set("X-Api-Key", *pubKey)
	resp, err := publisher.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("publish: %d %s", resp.StatusCode, b)
	}
	return bytes.Count(b, []byte(`"stored":true`)), nil
}

func benchUnique() error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	conns, _, err := dialMany(ctx, *devices, func(i int) string { return "?device=d" + strconv.Itoa(i) })
	if err != nil {
		return err
	}
	var got atomic.Int64
	lat := &latencies{}
	for _, c := range conns {
		go readAll(ctx, c, &got, lat, true)
	}
	var sent, failed atomic.Int64
	serverCPU, selfCPU := cpu(*pid), cpu(0)
	stop := time.Now().Add(*dur)
	workers := 64
	if *batch > 1 {
		workers = 8
	}
	var tick <-chan time.Time
	if *rate > 0 {
		t := time.NewTicker(time.Second * time.Duration(*batch) / time.Duration(*rate))
		defer t.Stop()
		tick = t.C
	}
	jobs := make(chan int, 4096)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				if *batch > 1 {
					k, err := postBatch(i)
					if err != nil {
						failed.Add(int64(*batch))
						continue
					}
					sent.Add(int64(k))
					continue
				}
				q := "?to=device&app=bench-reader&device=d" + strconv.Itoa(i%*devices)
				if _, err := post(q, stamp("")); err != nil {
					failed.Add(1)
					continue
				}
				sent.Add(1)
			}
		}()
	}
	start := time.Now()
	for i := 0; time.Now().Before(stop); i++ {
		if tick != nil {
			<-tick
			select {
			case jobs <- i:
			default: // the publishers are behind: this message is not sent
			}
			continue
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for got.Load() < sent.Load() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	el := time.Since(start)
	fmt.Printf("push-unique devices=%d batch=%d rate=%d sent=%d failed=%d delivered=%d msgs_per_s=%.0f p50_ms=%.1f p99_ms=%.1f %s\n",
		len(conns), *batch, *rate, sent.Load(), failed.Load(), got.Load(), float64(got.Load())/el.Seconds(), ms(lat.pct(0.5)), ms(lat.pct(0.99)), usage(serverCPU, selfCPU, el))
	for _, c := range conns {
		_ = c.CloseNow()
	}
	return nil
}

func benchResume() error {
	ctx := context.Background()
	lat := &latencies{}
	for r := range *rounds {
		last, err := post("", stamp("mark"))
		if err != nil {
			return err
		}
		for range *missed {
			if _, err := post("", stamp("missed")); err != nil {
				return err
			}
		}
		start := time.Now()
		c, first, err := dialFirst(ctx, "?after="+last)
		if err != nil {
			return fmt.Errorf("round %d: %w", r, err)
		}
		seen := bytes.Count(first, []byte(`"type":"message"`))
		for seen < *missed {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			b, err := c.Read(rctx)
			cancel()
			if err != nil {
				return fmt.Errorf("round %d after %d: %w", r, seen, err)
			}
			seen += bytes.Count(b, []byte(`"type":"message"`))
		}
		lat.add(time.Since(start))
		_ = c.CloseNow()
	}
	fmt.Printf("push-resume missed=%d rounds=%d p50_ms=%.1f p99_ms=%.1f\n", *missed, *rounds, ms(lat.pct(0.5)), ms(lat.pct(0.99)))
	return nil
}
