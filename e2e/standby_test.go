package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/bus/natstest"
)

// Two three-node NATS clusters, a primary and a standby (leaf nodes of
// the primary, JetStream domains primary and standby): `jetway standby
// init` mirrors the registry onto the standby, each cluster has its own
// worker, and the edge knows both (--nats-standby). Every primary node
// goes down under load: the edge's calls move to the standby within the
// 30 s the issue allows (here: its --failover-after of 2s, and at once for
// calls that find the primary down), served by the standby's worker
// from the mirrored registry; /site and /metrics say so.
func TestStandbyClusterTakesOver(t *testing.T) {
	t.Parallel()
	primary, purls, _, surls := natstest.RunStandbyPair(t, 3)
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("ok"))
	}))
	defer be.Close()
	putAPIArgs := []string{"api", "put", "-", "--nats", purls, "--replicas", "3"}
	if res := jetway(t, entry("e2e.site", "site", "GET", "/site", httpBackend(be.URL), map[string]any{"timeout": "2s"}), putAPIArgs...); res.code != 0 {
		t.Fatalf("api put: %d %s%s", res.code, res.stdout, res.stderr)
	}
	res := jetway(t, "", "standby", "init", "--nats", surls, "--primary-domain", "primary", "--replicas", "3")
	if res.code != 0 {
		t.Fatalf("standby init: %d %s%s", res.code, res.stdout, res.stderr)
	}
	t.Logf("standby init:\n%s", res.stdout)
	natstest.CheckFor(t, 20*time.Second, 200*time.Millisecond, func() error {
		r := jetway(t, "", "standby", "status", "--nats", surls)
		if r.code != 0 {
			return fmt.Errorf("standby status: %d %s%s", r.code, r.stdout, r.stderr)
		}
		return nil
	})

	wp := startNode(t, "worker-primary", "worker", "", "--nats", purls, "--pool", "site")
	ws := startNode(t, "worker-standby", "worker", "", "--nats", surls, "--pool", "site")
	edge := startNode(t, "edge", "edge", "", "--nats", purls, "--nats-standby", surls, "--failover-after", "2s", "--failback-after", "0",
		// Longer than the move and the registry's re-watch on the standby
		// take (the 2 s wait and the detection: 3.6 s once on a loaded CI
		// machine, stale 8 s once under -race), which the registry spends
		// stale; shorter than the move and the 10.5 s after it, past which
		// the test checks the edge stays ready.
		"--ready-max-stale", "12s")
	for _, n := range []*node{wp, ws, edge} {
		n.waitReady(t)
	}
	wp.waitServing(t, "e2e.site")
	ws.waitServing(t, "e2e.site") // from the mirror
	waitBody(t, edge.edge+"/site", "ok")

	var (
		mu        sync.Mutex
		lastFail  time.Time
		fails, ok int
		failures  []string
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				r, err := do(http.MethodGet, edge.edge+"/site", nil, nil)
				mu.Lock()
				if err != nil || r.status != http.StatusOK {
					fails++
					lastFail = time.Now()
					if len(failures) < 10 {
						failures = append(failures, fmt.Sprintf("%v %v", err, r))
					}
				} else {
					ok++
				}
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	// A load balancer's view: /readyz through the move.
	var unready []string
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if st, rz, err := edge.readyz(); err == nil && st != http.StatusOK {
				mu.Lock()
				unready = append(unready, rz.Reason)
				mu.Unlock()
			}
		}
	}()
	time.Sleep(500 * time.Millisecond)
	down := time.Now()
	for _, s := range primary {
		go s.Shutdown()
	}
	// Calls succeed again, and the edge says it moved.
	var site struct {
		Active string `json:"active"`
		Moves  int    `json:"moves"`
	}
	natstest.CheckFor(t, 30*time.Second, 100*time.Millisecond, func() error {
		r := get(t, edge.admin+"/site")
		if err := json.Unmarshal(r.body, &site); err != nil {
			return err
		}
		if site.Active != "standby" {
			return fmt.Errorf("active site %q", site.Active)
		}
		return nil
	})
	moved := time.Since(down)
	time.Sleep(10500 * time.Millisecond) // past --ready-max-stale: on the standby, the edge stays ready
	close(stop)
	wg.Wait()
	recovered := time.Duration(0)
	if !lastFail.IsZero() {
		recovered = lastFail.Sub(down)
	}
	t.Logf("primary down: calls moved to the standby after %s; %d calls ok, %d failed, the last failure %s after the loss",
		moved.Round(time.Millisecond), ok, fails, recovered.Round(time.Millisecond))
	if moved > 30*time.Second {
		t.Fatalf("the standby took over after %s, past 30s", moved)
	}
	if len(unready) > 0 {
		t.Fatalf("/readyz said 503 %d times while the standby could take the calls: %q", len(unready), unready[0])
	}
	if fails > 0 {
		t.Fatalf("%d calls failed through the primary's loss: %v", fails, failures)
	}
	if r := get(t, edge.edge+"/site"); r.status != http.StatusOK {
		t.Fatalf("a call after the move: %v", r)
	}
	if st, rz, _ := edge.readyz(); st != http.StatusOK {
		t.Fatalf("/readyz on the standby: %d %s", st, rz.Reason)
	}
	m := get(t, edge.admin+"/metrics")
	if !containsLine(string(m.body), `jetway_site_active{node=`, `site="standby"} 1`) {
		t.Fatalf("/metrics does not say the standby is active:\n%s", m.body)
	}
}

func containsLine(body, prefix, suffix string) bool {
	for _, l := range splitLines(body) {
		if len(l) >= len(prefix)+len(suffix) && l[:len(prefix)] == prefix && l[len(l)-len(suffix):] == suffix {
			return true
		}
	}
	return false
}

func splitLines(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}
