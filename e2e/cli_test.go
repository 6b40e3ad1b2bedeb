package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/bus/natstest"
)

// TestMetricShowsRecentHistory: with no live traffic, jetway metric prints
// the API's recent per-second records that the edges keep, then follows.
func TestMetricShowsRecentHistory(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	edge := c.startEdge(t, "edge")
	c.startWorker(t, "worker", "cli")
	putAPI(t, c.url, entry("cli.metric", "cli", "GET", "/v1/cli/metric", mockBackend("ok"), nil))
	waitBody(t, edge.edge+"/v1/cli/metric", "ok")
	for range 5 {
		get(t, edge.edge+"/v1/cli/metric")
	}
	// Once the edge has closed the seconds with traffic (its admin /metric
	// shows them), their records have been published: what metric prints
	// now comes from the history the edge keeps.
	natstest.CheckFor(t, 10*time.Second, 100*time.Millisecond, func() error {
		if r := get(t, edge.admin+"/metric?api=cli.metric"); !strings.Contains(string(r.body), "|cli.metric|") {
			return fmt.Errorf("edge's /metric: %s", r.body)
		}
		return nil
	})
	time.Sleep(1100 * time.Millisecond) // past the next second's publish too, so nothing live is left
	calls := 0
	natstest.CheckFor(t, 10*time.Second, 200*time.Millisecond, func() error {
		res := jetway(t, "", "metric", "cli.metric", "--seconds", "1", "--nats", c.url)
		calls = 0
		for _, l := range strings.Split(res.stdout, "\n") {
			f := strings.Split(l, "|")
			if len(f) == 9 && f[1] == "cli.metric" && f[2] != "" {
				n, _ := strconv.Atoi(f[3])
				calls += n
			}
		}
		if res.code != 0 || calls < 6 {
			return fmt.Errorf("jetway metric: exit %d, %d calls in the records, want >= 6\n%s%s", res.code, calls, res.stdout, res.stderr)
		}
		return nil
	})
}
