package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// proc is one process of the cluster, its output in a log file.
type proc struct {
	name string
	bin  string
	args []string
	log  string
	cmd  *exec.Cmd
}

func (p *proc) start() error {
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	p.cmd = exec.Command(p.bin, p.args...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.cmd.Env = append(os.Environ(), "GOMAXPROCS=2")
	if err := p.cmd.Start(); err != nil {
		_ = f.Close()
		return fmt.Errorf("starting %s: %w", p.name, err)
	}
	go func() { _ = p.cmd.Wait(); _ = f.Close() }()
	return nil
}

func (p *proc) signal(sig syscall.Signal) error {
	if p.cmd == nil || p.cmd.Process == nil {
		return fmt.Errorf("%s is not running", p.name)
	}
	return p.cmd.Process.Signal(sig)
}

func (p *proc) kill() error { return p.signal(syscall.SIGKILL) }

// restartAfterKill starts the process again, once the killed one is
// gone.
func (p *proc) restartAfterKill() error {
	deadline := time.Now().Add(5 * time.Second)
	for p.cmd.ProcessState == nil && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	return p.start()
}

// stop ends the process (SIGCONT first: it may be frozen).
func (p *proc) stop() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	deadline := time.Now().Add(5 * time.Second)
	for p.cmd.ProcessState == nil && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	_ = p.cmd.Process.Kill()
}

// node is a jetway edge or worker with its admin listener.
type node struct {
	proc
	listen, admin string
}

type cluster struct {
	nats         []*proc
	natsURLs     []string
	standby      []*proc // a standby cluster (drills with standby): leaf nodes of the primary
	standbyURLs  []string
	edges        []*node
	workers      []*node
	lb           *proc
	entry        string // where the load calls: haproxy, or edge-1
	mainBackend  *http.Server
	otherBackend *http.Server
	timeout      time.Duration // the APIs' timeout
}

// startCluster starts, in dir: three NATS nodes (n1 to n3, JetStream,
// one cluster), the APIs (drill.main and drill.other, R3 registry), two
// workers of pool drill (on n2 and n3), two edges (edge-1 on n1, edge-2
// on n2; each learns the other nodes from its own) and haproxy in front
// of the edges, checking their /readyz.
func startCluster(cfg config, dir, haproxy string, standby bool) (*cluster, error) {
	c := &cluster{timeout: 2 * time.Second}
	var err error
	if c.mainBackend, err = serveBackend("main"); err != nil {
		return c, err
	}
	if c.otherBackend, err = serveBackend("other"); err != nil {
		return c, err
	}
	var leafs []string
	var err2 error
	if c.nats, c.natsURLs, leafs, err2 = startNATS(cfg, dir, "drills", "n", standby, nil); err2 != nil {
		return c, err2
	}
	all := strings.Join(c.natsURLs, ",")
	for _, api := range []struct{ name, path, backend string }{
		{"drill.main", "/drill", c.mainBackend.Addr},
		{"drill.other", "/other", c.otherBackend.Addr},
	} {
		doc := fmt.Sprintf(`{"name":%q,"pool":"drill","route":{"method":"GET","path":%q},"timeout":%q,"backend":{"type":"http","url":"http://%s"}}`,
			api.name, api.path, c.timeout.String(), api.backend)
		if err := jetwayCLI(cfg.jetway, doc, "api", "put", "-", "--nats", all, "--replicas", "3"); err != nil {
			return c, err
		}
	}
	for i, url := range []string{c.natsURLs[1], c.natsURLs[2]} {
		w, err := startNode(cfg.jetway, dir, fmt.Sprintf("worker-%d", i+1), "worker", url, "--pool", "drill")
		if err != nil {
			return c, err
		}
		c.workers = append(c.workers, w)
	}
	var edgeArgs []string
	if standby {
		if c.standby, c.standbyURLs, _, err = startNATS(cfg, dir, "drills-standby", "s", false, leafs); err != nil {
			return c, err
		}
		sall := strings.Join(c.standbyURLs, ",")
		if err := jetwayCLI(cfg.jetway, "", "standby", "init", "--nats", sall, "--primary-domain", "primary", "--replicas", "3"); err != nil {
			return c, err
		}
		w, err := startNode(cfg.jetway, dir, "worker-standby", "worker", c.standbyURLs[0], "--pool", "drill")
		if err != nil {
			return c, err
		}
		c.workers = append(c.workers, w)
		edgeArgs = []string{"--nats-standby", sall, "--failover-after", "5s"}
	}
	for i, url := range []string{c.natsURLs[0], c.natsURLs[1]} {
		e, err := startNode(cfg.jetway, dir, fmt.Sprintf("edge-%d", i+1), "edge", url, edgeArgs...)
		if err != nil {
			return c, err
		}
		c.edges = append(c.edges, e)
	}
	for _, n := range append(append([]*node{}, c.workers...), c.edges...) {
		if err := waitHTTP("http://"+n.admin+"/readyz", 30*time.Second); err != nil {
			return c, err
		}
	}
	for _, e := range c.edges {
		for _, p := range []string{"/drill", "/other"} {
			if err := waitHTTP("http://"+e.listen+p, 30*time.Second); err != nil {
				return c, err
			}
		}
	}
	c.entry = "http://" + c.edges[0].listen
	if haproxy != "" {
		if err := c.startLB(haproxy, dir); err != nil {
			return c, err
		}
	}
	return c, nil
}

// startNATS starts a three-node cluster named name, its servers prefix1
// to prefix3: with leafPort, the primary of a standby pair (JetStream
// domain primary, leaf node listeners, whose URLs it returns); with
// remotes, the standby (domain standby, a leaf node of each remote).
func startNATS(cfg config, dir, name, prefix string, leafPort bool, remotes []string) (procs []*proc, urls, leafs []string, err error) {
	var client, routes, leafPorts []int
	for range 3 {
		var p, r, l int
		if p, err = freePort(); err == nil {
			if r, err = freePort(); err == nil {
				l, err = freePort()
			}
		}
		if err != nil {
			return nil, nil, nil, err
		}
		client, routes, leafPorts = append(client, p), append(routes, r), append(leafPorts, l)
	}
	var routeURLs []string
	for _, r := range routes {
		routeURLs = append(routeURLs, fmt.Sprintf("nats://127.0.0.1:%d", r))
	}
	for i := range 3 {
		server := fmt.Sprintf("%s%d", prefix, i+1)
		js := fmt.Sprintf("jetstream { store_dir: %q }", filepath.Join(dir, server))
		extra := ""
		switch {
		case leafPort:
			js = fmt.Sprintf("jetstream { store_dir: %q, domain: primary }", filepath.Join(dir, server))
			extra = fmt.Sprintf("leafnodes { listen: 127.0.0.1:%d }\n", leafPorts[i])
			leafs = append(leafs, fmt.Sprintf("nats-leaf://127.0.0.1:%d", leafPorts[i]))
		case len(remotes) > 0:
			js = fmt.Sprintf("jetstream { store_dir: %q, domain: standby }", filepath.Join(dir, server))
			extra = fmt.Sprintf("leafnodes { remotes: [{ urls: [%s] }] }\n", strings.Join(quoteAll(remotes), ", "))
		}
		conf := filepath.Join(dir, server+".conf")
		body := fmt.Sprintf(`server_name: %s
listen: 127.0.0.1:%d
%s
cluster {
  name: %s
  listen: 127.0.0.1:%d
  routes: [%s]
}
%s`, server, client[i], js, name, routes[i], strings.Join(routeURLs, ", "), extra)
		if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
			return nil, nil, nil, err
		}
		p := &proc{name: server, bin: cfg.natsServer, args: []string{"-c", conf}, log: filepath.Join(dir, server+".log")}
		if err := p.start(); err != nil {
			return nil, nil, nil, err
		}
		procs = append(procs, p)
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", client[i]))
	}
	// JetStream is ready when the cluster has a meta leader: the first
	// jetway command retries until then.
	for _, u := range urls {
		if err := waitTCP(strings.TrimPrefix(u, "nats://"), 10*time.Second); err != nil {
			return nil, nil, nil, err
		}
	}
	return procs, urls, leafs, nil
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}

func waitTCP(addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			_ = c.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("nothing listens on %s after %s", addr, timeout)
}

// jetwayCLI runs a jetway command with stdin, retrying for a while: a
// new cluster elects its JetStream leader in a few seconds.
func jetwayCLI(bin, stdin string, args ...string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		cmd := exec.Command(bin, args...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("jetway %s: %v: %s", strings.Join(args, " "), err, out)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func startNode(bin, dir, name, role, natsURL string, extra ...string) (*node, error) {
	admin, err := freePort()
	if err != nil {
		return nil, err
	}
	n := &node{admin: fmt.Sprintf("127.0.0.1:%d", admin)}
	args := []string{role, "--nats", natsURL, "--admin", n.admin, "--data", filepath.Join(dir, name), "--log-format", "json"}
	if role == "edge" {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		n.listen = fmt.Sprintf("127.0.0.1:%d", port)
		args = append(args, "--listen", n.listen, "--access-log=false")
	}
	n.proc = proc{name: name, bin: bin, args: append(args, extra...), log: filepath.Join(dir, name+".log")}
	return n, n.start()
}

// startLB starts haproxy in front of the edges: it sends calls to the
// edges whose /readyz is 200 (checked every 250ms; out after two failed
// checks), and sends an idempotent call again on another edge when its
// edge failed it at the connection (killed mid-call).
func (c *cluster) startLB(haproxy, dir string) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	var servers strings.Builder
	for i, e := range c.edges {
		_, adminPort, _ := net.SplitHostPort(e.admin)
		fmt.Fprintf(&servers, "  server edge-%d %s check port %s inter 250ms fall 2 rise 2\n", i+1, e.listen, adminPort)
	}
	conf := filepath.Join(dir, "haproxy.cfg")
	body := fmt.Sprintf(`global
  maxconn 4096
defaults
  mode http
  timeout connect 1s
  timeout client 30s
  timeout server 30s
  retries 2
  option redispatch
  retry-on conn-failure empty-response response-timeout
frontend drills
  bind 127.0.0.1:%d
  default_backend edges
backend edges
  balance roundrobin
  option httpchk GET /readyz
%s`, port, servers.String())
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		return err
	}
	c.lb = &proc{name: "haproxy", bin: haproxy, args: []string{"-f", conf, "-db"}, log: filepath.Join(dir, "haproxy.log")}
	if err := c.lb.start(); err != nil {
		return err
	}
	c.entry = fmt.Sprintf("http://127.0.0.1:%d", port)
	return waitHTTP(c.entry+"/drill", 10*time.Second)
}

func (c *cluster) stop() {
	if c.lb != nil {
		c.lb.stop()
	}
	for _, n := range append(append([]*node{}, c.edges...), c.workers...) {
		n.stop()
	}
	for _, p := range append(append([]*proc{}, c.nats...), c.standby...) {
		p.stop()
	}
	for _, b := range []*http.Server{c.mainBackend, c.otherBackend} {
		if b != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = b.Shutdown(ctx)
			cancel()
		}
	}
}

// serveBackend serves a backend that answers in about 2 ms, as a fast
// internal service does; Addr is where it listens.
func serveBackend(name string) (*http.Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &http.Server{Addr: ln.Addr().String(), Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(2 * time.Millisecond)
		_, _ = w.Write([]byte(name))
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := s.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintln(os.Stderr, "backend", name, err)
		}
	}()
	return s, nil
}
