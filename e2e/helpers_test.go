// Package e2e holds Jetway's end-to-end tests: they build the jetway binary
// once, start real processes (serve, edge, worker, api) against real NATS
// servers with JetStream, put real HTTP backends (httptest) behind them, and
// drive everything only through public surfaces: HTTP, the CLI and NATS.
//
// Nothing waits with fixed sleeps: every wait polls a condition with a
// bounded timeout, and process ports are learned from their JSON log lines.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus/natstest"
)

// jetwayBin is the binary built once by TestMain.
var jetwayBin string

// Timeouts. They bound waits; they are not sleeps.
const (
	startTimeout = 15 * time.Second // a process logs its listeners and becomes ready
	applyTimeout = 5 * time.Second  // a registry change is live (target: 100ms)
	exitTimeout  = 10 * time.Second // a signalled process exits
	pollEvery    = 10 * time.Millisecond
)

func TestMain(m *testing.M) { os.Exit(runMain(m)) }

func runMain(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		fmt.Println("e2e: skipped in -short mode (they build the binary and run processes)")
		return 0
	}
	dir, err := os.MkdirTemp("", "jetway-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	jetwayBin = filepath.Join(dir, "jetway")
	args := []string{"build", "-o", jetwayBin}
	// JETWAY_E2E_RACE=1 also builds the binary with the race detector
	// (slower; off by default to keep timings sane on small machines).
	if os.Getenv("JETWAY_E2E_RACE") == "1" {
		args = append(args, "-race")
	}
	args = append(args, "github.com/jetway-gw/jetway/cmd/jetway")
	// The environment, GOFLAGS included, is inherited.
	build := exec.Command("go", args...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building jetway:", err)
		return 1
	}
	return m.Run()
}

// childEnv is the environment of every jetway process: ours without
// JETWAY_* variables, so that nothing from the caller's shell leaks in.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "JETWAY_") {
			env = append(env, kv)
		}
	}
	return env
}

// ---------------------------------------------------------------------------
// Processes

// logLine is one JSON log line of a jetway process.
type logLine map[string]any

func (l logLine) str(k string) string {
	switch v := l[k].(type) {
	case string:
		return v
	case nil:
		return ""
	default:
		return fmt.Sprint(v)
	}
}

// proc is a running jetway process whose output is collected line by line.
type proc struct {
	name string
	cmd  *exec.Cmd

	mu      sync.Mutex
	lines   []string
	partial []byte
	changed chan struct{} // closed and replaced whenever a line arrives

	done    chan struct{} // closed when the process has exited
	waitErr error
}

// Write collects output; it is the process's stdout and stderr.
func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.partial = append(p.partial, b...)
	added := false
	for {
		i := bytes.IndexByte(p.partial, '\n')
		if i < 0 {
			break
		}
		p.lines = append(p.lines, string(p.partial[:i]))
		p.partial = p.partial[i+1:]
		added = true
	}
	if added {
		close(p.changed)
		p.changed = make(chan struct{})
	}
	return len(b), nil
}

// startBin starts a jetway binary (jetwayBin, or a previous release's)
// with args. The process is killed with SIGKILL at the end of the test if
// it still runs, and its output is logged when the test failed.
func startBin(t *testing.T, bin, name string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, changed: make(chan struct{}), done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = childEnv()
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() {
		err := p.cmd.Wait()
		p.mu.Lock()
		p.waitErr = err
		p.mu.Unlock()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.exited() {
			_ = p.cmd.Process.Kill()
			select {
			case <-p.done:
			case <-time.After(exitTimeout):
				t.Errorf("%s (pid %d) did not exit after SIGKILL", name, p.cmd.Process.Pid)
			}
		}
		if t.Failed() {
			t.Logf("---- output of %s (pid %d) ----\n%s", name, p.cmd.Process.Pid, strings.Join(p.output(), "\n"))
		}
	})
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) output() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := append([]string(nil), p.lines...)
	if len(p.partial) > 0 {
		out = append(out, string(p.partial))
	}
	return out
}

// mark is the number of lines logged so far; pass it to waitLogFrom to look
// only at later lines.
func (p *proc) mark() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.lines)
}

// waitLog waits for a JSON log line that match accepts and returns it.
func (p *proc) waitLog(t *testing.T, timeout time.Duration, what string, match func(logLine) bool) logLine {
	t.Helper()
	return p.waitLogFrom(t, 0, timeout, what, match)
}

func (p *proc) waitLogFrom(t *testing.T, from int, timeout time.Duration, what string, match func(logLine) bool) logLine {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	i := from
	for {
		p.mu.Lock()
		lines := p.lines[min(i, len(p.lines)):]
		changed := p.changed
		p.mu.Unlock()
		for _, s := range lines {
			i++
			var l logLine
			if json.Unmarshal([]byte(s), &l) == nil && match(l) {
				return l
			}
		}
		select {
		case <-changed:
		case <-p.done:
			// Output is complete once the process is reaped; scan it once more.
			if p.mark() > i {
				continue
			}
			t.Fatalf("%s exited (%v) before logging %s", p.name, p.exitErr(), what)
		case <-timer.C:
			t.Fatalf("%s did not log %s within %v", p.name, what, timeout)
		}
	}
}

// msgIs matches log lines by their message.
func msgIs(msg string) func(logLine) bool {
	return func(l logLine) bool { return l.str("msg") == msg }
}

func (p *proc) exitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waitErr
}

func (p *proc) signal(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signalling %s: %v", p.name, err)
	}
}

// kill9 kills the process with SIGKILL and waits until it is reaped.
func (p *proc) kill9(t *testing.T) {
	t.Helper()
	p.signal(t, syscall.SIGKILL)
	p.waitExit(t, exitTimeout)
}

// waitExit waits for the process to exit and returns its exit code (-1 when
// killed by a signal).
func (p *proc) waitExit(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("%s did not exit within %v", p.name, timeout)
	}
	return p.cmd.ProcessState.ExitCode()
}

// node is a started serve, edge or worker process.
type node struct {
	*proc
	edge    string // http://host:port of the edge listener, if any
	admin   string // http://host:port of the admin listener
	natsURL string // the embedded server's URL (serve only)
	data    string
}

// startNode starts `jetway <role>` with JSON logs, loopback listeners on
// free ports and data in data (a new temp dir when empty), and learns its
// addresses from its log. It does not wait for readiness.
func startNode(t *testing.T, name, role, data string, args ...string) *node {
	t.Helper()
	return startNodeBin(t, jetwayBin, name, role, data, args...)
}

// startNodeBin is startNode with another binary (a previous release's).
func startNodeBin(t *testing.T, bin, name, role, data string, args ...string) *node {
	t.Helper()
	if data == "" {
		data = t.TempDir()
	}
	full := []string{role, "--log-format", "json", "--admin", "127.0.0.1:0", "--data", data, "--drain-timeout", "10s"}
	hasEdge := role == "serve" || role == "edge"
	if hasEdge {
		full = append(full, "--listen", "127.0.0.1:0")
	}
	embedded := role == "serve" && !contains(args, "--nats")
	if embedded {
		full = append(full, "--nats-listen", "127.0.0.1:0")
	}
	full = append(full, args...)
	n := &node{proc: startBin(t, bin, name, full...), data: data}
	if embedded {
		n.natsURL = n.waitLog(t, startTimeout, `"embedded nats started"`, msgIs("embedded nats started")).str("url")
	}
	if hasEdge {
		n.edge = "http://" + n.waitLog(t, startTimeout, `"edge listening"`, msgIs("edge listening")).str("addr")
	}
	n.admin = "http://" + n.waitLog(t, startTimeout, `"admin listening"`, msgIs("admin listening")).str("addr")
	return n
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// readyz is the body of GET /readyz.
type readyz struct {
	Ready    bool     `json:"ready"`
	Reason   string   `json:"reason"`
	Routes   int      `json:"routes"`
	Serving  []string `json:"serving"`
	Registry struct {
		Source string `json:"source"`
		APIs   int    `json:"apis"`
	} `json:"registry"`
}

func (n *node) readyz() (int, readyz, error) {
	var rz readyz
	r, err := do(http.MethodGet, n.admin+"/readyz", nil, nil)
	if err != nil {
		return 0, rz, err
	}
	if err := json.Unmarshal(r.body, &rz); err != nil {
		return r.status, rz, fmt.Errorf("readyz body %q: %v", r.body, err)
	}
	return r.status, rz, nil
}

// waitReady waits until /readyz answers 200.
func (n *node) waitReady(t *testing.T) {
	t.Helper()
	natstest.CheckFor(t, startTimeout, pollEvery, func() error {
		st, rz, err := n.readyz()
		if err != nil {
			return err
		}
		if st != http.StatusOK {
			return fmt.Errorf("%s /readyz: %d %s", n.name, st, rz.Reason)
		}
		return nil
	})
}

// waitServing waits until a worker serves api (it has subscribed to it).
func (n *node) waitServing(t *testing.T, api string) {
	t.Helper()
	natstest.CheckFor(t, applyTimeout, pollEvery, func() error {
		_, rz, err := n.readyz()
		if err != nil {
			return err
		}
		if !contains(rz.Serving, api) {
			return fmt.Errorf("%s serves %v, not %s yet", n.name, rz.Serving, api)
		}
		return nil
	})
}

// cluster is a natstest server with an edge and workers as separate processes.
type cluster struct {
	ns  *server.Server
	url string
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	ns := natstest.RunServer(t)
	return &cluster{ns: ns, url: ns.ClientURL()}
}

func (c *cluster) startEdge(t *testing.T, name string) *node {
	t.Helper()
	n := startNode(t, name, "edge", "", "--nats", c.url)
	n.waitReady(t)
	return n
}

func (c *cluster) startWorker(t *testing.T, name string, pools ...string) *node {
	t.Helper()
	args := []string{"--nats", c.url}
	for _, p := range pools {
		args = append(args, "--pool", p)
	}
	n := startNode(t, name, "worker", "", args...)
	n.waitReady(t)
	return n
}

// workerConns counts the server's client connections named name.
func workerConns(ns *server.Server, name string) (int, error) {
	cz, err := ns.Connz(&server.ConnzOptions{Limit: 4096})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, c := range cz.Conns {
		if c.Name == name {
			n++
		}
	}
	return n, nil
}

// waitConns waits until the server counts want connections named name (for
// example until it has noticed that a killed worker's socket is closed).
func waitConns(t *testing.T, ns *server.Server, name string, want int) {
	t.Helper()
	natstest.CheckFor(t, applyTimeout, pollEvery, func() error {
		n, err := workerConns(ns, name)
		if err != nil {
			return err
		}
		if n != want {
			return fmt.Errorf("%d connections named %s, want %d", n, name, want)
		}
		return nil
	})
}

// ---------------------------------------------------------------------------
// CLI

type cliResult struct {
	stdout, stderr string
	code           int
}

// jetway runs the CLI to completion with stdin and returns its output.
func jetway(t *testing.T, stdin string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, jetwayBin, args...)
	cmd.Env = childEnv()
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	res := cliResult{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		res.code = ee.ExitCode()
	default:
		t.Fatalf("running jetway %v: %v", args, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("jetway %v did not finish in time", args)
	}
	return res
}

var revisionRE = regexp.MustCompile(`at revision (\d+)`)

// putAPI publishes an entry with `jetway api put -` and returns its revision.
func putAPI(t *testing.T, natsURL, doc string) uint64 {
	t.Helper()
	res := jetway(t, doc, "api", "put", "-", "--nats", natsURL)
	if res.code != 0 {
		t.Fatalf("jetway api put: exit %d\nstdout: %s\nstderr: %s", res.code, res.stdout, res.stderr)
	}
	m := revisionRE.FindStringSubmatch(res.stdout)
	if m == nil {
		t.Fatalf("jetway api put printed no revision: %q", res.stdout)
	}
	rev, _ := strconv.ParseUint(m[1], 10, 64)
	return rev
}

// entry builds an API entry; extra fields override or add to the base.
func entry(name, pool, method, path string, backend map[string]any, extra map[string]any) string {
	e := map[string]any{
		"name":    name,
		"pool":    pool,
		"route":   map[string]any{"method": method, "path": path},
		"backend": backend,
	}
	for k, v := range extra {
		e[k] = v
	}
	b, err := json.Marshal(e)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func mockBackend(body string) map[string]any {
	return map[string]any{"type": "mock", "status": 200, "body": body}
}

func httpBackend(url string) map[string]any {
	return map[string]any{"type": "http", "url": url}
}

// natsConn is a new connection to url, closed when the test ends.
func natsConn(t *testing.T, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("connecting to %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// kvBucket opens the jetway_apis bucket over a new connection to url.
func kvBucket(t *testing.T, url string) jetstream.KeyValue {
	t.Helper()
	js, err := jetstream.New(natsConn(t, url))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, "jetway_apis")
	if err != nil {
		t.Fatalf("opening bucket jetway_apis: %v", err)
	}
	return kv
}

// ---------------------------------------------------------------------------
// HTTP

var client = &http.Client{Timeout: 30 * time.Second}

type response struct {
	status int
	header http.Header
	body   []byte
	took   time.Duration
}

// gatewayError is the JSON body of a gateway-made error.
type gatewayError struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	RequestID string `json:"request_id"`
}

func (r response) gwErr() gatewayError {
	var e gatewayError
	_ = json.Unmarshal(r.body, &e)
	return e
}

func (r response) String() string {
	return fmt.Sprintf("%d %s (after %v)", r.status, bytes.TrimSpace(r.body), r.took.Round(time.Millisecond))
}

// do sends one request; safe from any goroutine.
func do(method, url string, body io.Reader, hdr http.Header) (response, error) {
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		return response{}, err
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, err
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b, took: time.Since(start)}, nil
}

func get(t *testing.T, url string) response {
	t.Helper()
	r, err := do(http.MethodGet, url, nil, nil)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return r
}

// wantError checks a gateway-made error: status, JSON code, and a request
// id that matches the X-Request-Id header.
func wantError(t *testing.T, r response, status int, code string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("got %v, want %d %s", r, status, code)
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("error Content-Type = %q, want application/json", ct)
	}
	e := r.gwErr()
	if e.Code != code {
		t.Fatalf("got %v, want code %s", r, code)
	}
	if e.Message == "" {
		t.Errorf("error without message: %s", r.body)
	}
	if e.RequestID == "" || e.RequestID != r.header.Get("X-Request-Id") {
		t.Errorf("request_id %q, X-Request-Id header %q: want both set and equal", e.RequestID, r.header.Get("X-Request-Id"))
	}
}

// waitFor polls GET url until check accepts the response.
func waitFor(t *testing.T, url string, timeout time.Duration, check func(response) error) response {
	t.Helper()
	var last response
	natstest.CheckFor(t, timeout, pollEvery, func() error {
		r, err := do(http.MethodGet, url, nil, nil)
		if err != nil {
			return err
		}
		last = r
		return check(r)
	})
	return last
}

// waitBody waits until GET url answers 200 with exactly body.
func waitBody(t *testing.T, url, body string) {
	t.Helper()
	waitFor(t, url, applyTimeout, func(r response) error {
		if r.status != http.StatusOK || string(r.body) != body {
			return fmt.Errorf("GET %s: %v, want 200 %q", url, r, body)
		}
		return nil
	})
}

// waitStatus waits until GET url answers status.
func waitStatus(t *testing.T, url string, status int) response {
	t.Helper()
	return waitFor(t, url, applyTimeout, func(r response) error {
		if r.status != status {
			return fmt.Errorf("GET %s: %v, want %d", url, r, status)
		}
		return nil
	})
}

// ---------------------------------------------------------------------------
// Backends

// backend is an HTTP backend in the test process. Handlers that block
// must also select on released (closed when the test ends, before the
// server closes) so that the server can shut down.
type backend struct {
	*httptest.Server
	hits     atomic.Int64
	released chan struct{}
	once     sync.Once
	arrived  chan string // the path of every request, if someone listens
}

func newBackend(t *testing.T, h func(b *backend, w http.ResponseWriter, r *http.Request)) *backend {
	t.Helper()
	b := &backend{released: make(chan struct{}), arrived: make(chan string, 128)}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.hits.Add(1)
		select {
		case b.arrived <- r.URL.Path:
		default:
		}
		h(b, w, r)
	}))
	t.Cleanup(b.Close)
	t.Cleanup(b.release) // runs before Close
	return b
}

func (b *backend) release() { b.once.Do(func() { close(b.released) }) }

// waitArrivals waits until n requests for path have reached the backend.
func (b *backend) waitArrivals(t *testing.T, path string, n int, timeout time.Duration) {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for got := 0; got < n; {
		select {
		case p := <-b.arrived:
			if p == path {
				got++
			}
		case <-timer.C:
			t.Fatalf("%d of %d requests for %s reached the backend within %v", got, n, path, timeout)
		}
	}
}

// block holds a request until the backend is released or the caller goes
// away; it answers 200 "released" in the first case.
func (b *backend) block(w http.ResponseWriter, r *http.Request) {
	select {
	case <-b.released:
		_, _ = io.WriteString(w, "released")
	case <-r.Context().Done():
	}
}
