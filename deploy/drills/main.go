// Command drills runs Jetway's failure drills on this machine, with real
// processes: a three-node NATS cluster (nats-server), two edges behind
// haproxy, two workers, backends, a steady load of idempotent calls, and
// one fault per drill. Each drill starts its own cluster, injects its
// fault under load, and prints what a caller saw: availability per
// 5-minute window (successes ÷ calls, not counting failures the backend
// caused), the calls that failed, the longest call and the time to
// recover.
//
//	go run ./deploy/drills                        # every drill, 5 minutes each
//	go run ./deploy/drills -drill nats-freeze     # one
//	go run ./deploy/drills -short -assert         # seconds each, as CI runs them
//
// See deploy/drills/README.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// drill is one fault: inject runs at the fault time and returns what
// undoes it (nil: nothing; the cluster is torn down at the end anyway),
// after the drill's hold.
type drill struct {
	name, what string
	// target is the availability (per 5-minute window) the drill must
	// keep on the measured API.
	target float64
	inject func(c *cluster) (undo func() error, err error)
	// other: the load also calls drill.other, whose backend the drill
	// stops; the measured API stays drill.main.
	other bool
	needs string // a tool the drill cannot run without ("haproxy")
	// standby: the drill runs a standby cluster too (jetway standby init,
	// a worker of its own, edges with --nats-standby).
	standby bool
}

var drills = []drill{
	{name: "worker-kill", what: "SIGKILL one of the pool's two workers", target: 99.99,
		inject: func(c *cluster) (func() error, error) { return nil, c.workers[0].kill() }},
	{name: "edge-kill", what: "SIGKILL one of the two edges behind haproxy", target: 99.99, needs: "haproxy",
		inject: func(c *cluster) (func() error, error) { return nil, c.edges[0].kill() }},
	{name: "nats-kill", what: "SIGKILL the NATS node edge-1 is connected to (one of three)", target: 99.99,
		inject: func(c *cluster) (func() error, error) { return c.nats[0].restartAfterKill, c.nats[0].kill() }},
	{name: "nats-freeze", what: "SIGSTOP the NATS node edge-1 is connected to (connections open, silent), SIGCONT after the hold", target: 99.99,
		inject: func(c *cluster) (func() error, error) {
			return func() error { return c.nats[0].signal(syscall.SIGCONT) }, c.nats[0].signal(syscall.SIGSTOP)
		}},
	{name: "quorum-loss", what: "SIGKILL two of the three NATS nodes (the registry loses its quorum; calls go on through the third), restart them after the hold", target: 99.99,
		inject: func(c *cluster) (func() error, error) {
			if err := c.nats[1].kill(); err != nil {
				return nil, err
			}
			return func() error {
				return errors.Join(c.nats[1].restartAfterKill(), c.nats[2].restartAfterKill())
			}, c.nats[2].kill()
		}},
	{name: "cluster-down", what: "SIGKILL every node of the primary NATS cluster: the edges move their calls to the standby cluster (its own worker, the mirrored registry)", target: 99.9, standby: true,
		inject: func(c *cluster) (func() error, error) {
			var errs []error
			for _, p := range c.nats {
				errs = append(errs, p.kill())
			}
			return nil, errors.Join(errs...)
		}},
	{name: "backend-down", what: "stop drill.other's backend: its calls fail fast and clear, drill.main does not notice", target: 99.99, other: true,
		inject: func(c *cluster) (func() error, error) { return nil, c.otherBackend.Close() }},
}

type config struct {
	duration, faultAt, hold time.Duration
	concurrency, rate       int
	jetway, natsServer      string
	haproxy                 string
	keep                    bool
	json, assert, short     bool
}

func main() {
	var (
		cfg   config
		which string
	)
	flag.StringVar(&which, "drill", "all", "drills to run, comma-separated: "+names()+", or all")
	flag.DurationVar(&cfg.duration, "duration", 5*time.Minute, "how long each drill's load runs")
	flag.DurationVar(&cfg.faultAt, "fault-at", 0, "when the fault comes, from the load's start (default a third of -duration)")
	flag.DurationVar(&cfg.hold, "hold", 20*time.Second, "how long a fault that is undone (a frozen node, lost quorum) lasts")
	flag.IntVar(&cfg.concurrency, "concurrency", 16, "callers, each calling in a loop at an even pace")
	flag.IntVar(&cfg.rate, "rate", 400, "calls per second, all callers together")
	flag.StringVar(&cfg.jetway, "jetway", "", "the jetway binary (default: built from this repository)")
	flag.StringVar(&cfg.natsServer, "nats-server", "", "the nats-server binary (default: built from go.mod's nats-server)")
	flag.StringVar(&cfg.haproxy, "haproxy", "haproxy", "haproxy, for the load balancer in front of the edges")
	flag.BoolVar(&cfg.short, "short", false, "the short form: 8s of load with 4 callers, 3s holds (for CI)")
	flag.BoolVar(&cfg.assert, "assert", false, "exit 1 when a drill misses its target")
	flag.BoolVar(&cfg.json, "json", false, "print each drill's result as a JSON line")
	flag.BoolVar(&cfg.keep, "keep", false, "keep the work folder (logs, configs)")
	flag.Parse()
	if cfg.short {
		cfg.duration, cfg.hold, cfg.concurrency, cfg.rate = 8*time.Second, 3*time.Second, 4, 200
	}
	if cfg.faultAt == 0 {
		cfg.faultAt = cfg.duration / 3
	}
	if err := run(cfg, which); err != nil {
		fmt.Fprintln(os.Stderr, "drills:", err)
		os.Exit(1)
	}
}

func names() string {
	var n []string
	for _, d := range drills {
		n = append(n, d.name)
	}
	return strings.Join(n, ", ")
}

func run(cfg config, which string) error {
	var chosen []drill
	for _, d := range drills {
		if which == "all" || contains(strings.Split(which, ","), d.name) {
			chosen = append(chosen, d)
		}
	}
	if len(chosen) == 0 {
		return fmt.Errorf("no drill named %q (drills: %s)", which, names())
	}
	work, err := os.MkdirTemp("", "jetway-drills-")
	if err != nil {
		return err
	}
	if cfg.keep {
		fmt.Println("work folder:", work)
	} else {
		defer func() { _ = os.RemoveAll(work) }()
	}
	if cfg.jetway == "" {
		cfg.jetway = filepath.Join(work, "jetway")
		if err := goBuild(cfg.jetway, "./cmd/jetway"); err != nil {
			return err
		}
	}
	if cfg.natsServer == "" {
		cfg.natsServer = filepath.Join(work, "nats-server")
		if err := goBuild(cfg.natsServer, "github.com/nats-io/nats-server/v2"); err != nil {
			return err
		}
	}
	haproxy, _ := exec.LookPath(cfg.haproxy)
	missed := 0
	for _, d := range chosen {
		if d.needs == "haproxy" && haproxy == "" {
			fmt.Printf("drill %s: skipped: %s not found (apt-get install haproxy)\n", d.name, cfg.haproxy)
			continue
		}
		res, err := runDrill(cfg, d, filepath.Join(work, d.name), haproxy)
		if err != nil {
			return fmt.Errorf("drill %s: %w", d.name, err)
		}
		if cfg.json {
			b, _ := json.Marshal(res)
			fmt.Println(string(b))
		} else {
			res.print(os.Stdout)
		}
		if !res.Met {
			missed++
		}
	}
	if cfg.assert && missed > 0 {
		return fmt.Errorf("%d drill(s) missed their target", missed)
	}
	return nil
}

func runDrill(cfg config, d drill, dir string, haproxy string) (*result, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	c, err := startCluster(cfg, dir, haproxy, d.standby)
	if err != nil {
		// Setting up is not the drill: a start that fails (a port taken
		// between freePort and the process binding it) is told with its
		// processes' logs and made once more, from new ports.
		if c != nil {
			c.stop()
		}
		fmt.Fprintf(os.Stderr, "drill %s: starting its processes failed, once more: %v\n", d.name, err)
		tailLogs(os.Stderr, dir, 20)
		dir = filepath.Join(dir, "again")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		if c, err = startCluster(cfg, dir, haproxy, d.standby); err != nil {
			if c != nil {
				c.stop()
			}
			tailLogs(os.Stderr, dir, 20)
			return nil, err
		}
	}
	defer c.stop()
	ld := newLoad(c.entry, cfg.concurrency, cfg.rate, d.other)
	ctx, cancel := context.WithTimeout(context.Background(), cfg.duration)
	defer cancel()
	done := make(chan struct{})
	go func() { ld.run(ctx); close(done) }()

	time.Sleep(cfg.faultAt)
	faultAt := time.Now()
	undo, err := d.inject(c)
	if err != nil {
		cancel()
		<-done
		return nil, fmt.Errorf("injecting the fault: %w", err)
	}
	var undoErr error
	if undo != nil {
		select {
		case <-time.After(cfg.hold):
			undoErr = undo()
		case <-ctx.Done():
		}
	}
	<-done
	if undoErr != nil {
		return nil, fmt.Errorf("undoing the fault: %w", undoErr)
	}
	res := ld.result(d, faultAt)
	res.Concurrency = cfg.concurrency
	res.Met = res.Worst >= d.target
	if cfg.short {
		// A few thousand calls cannot show 99.99 %: the short form only
		// checks that the fault did not take the service down.
		res.Target = 99
		res.Met = res.Worst >= res.Target && res.Longest <= (c.timeout+time.Second).Seconds()*1000
	}
	return res, nil
}

func goBuild(out, pkg string) error {
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s: %w", pkg, err)
	}
	return nil
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if strings.TrimSpace(x) == s {
			return true
		}
	}
	return false
}

// tailLogs writes the last n lines of each process log in dir to w.
func tailLogs(w io.Writer, dir string, n int) {
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		fmt.Fprintf(w, "--- %s (last %d lines)\n%s\n", filepath.Base(l), n, strings.Join(lines[max(0, len(lines)-n):], "\n"))
	}
}

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// waitHTTP waits until url answers 200.
func waitHTTP(url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		r, err := http.Get(url)
		if err == nil {
			b, _ := io.ReadAll(r.Body)
			_ = r.Body.Close()
			if r.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%d %s", r.StatusCode, strings.TrimSpace(string(b)))
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready after %s: %s", url, timeout, last)
}
