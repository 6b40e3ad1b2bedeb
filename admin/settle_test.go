package admin_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/admin"
	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/registry"
)

// A write answered OUTCOME_UNKNOWN that lands is read back by the admin
// API after its answer, and settled: its audit record is written, marked
// settled by read-back (it was missing from the trail).
func TestOutcomeUnknownSettledAfterAnswer(t *testing.T) {
	t.Cleanup(admin.SetRequestTimeout(time.Second))
	e := start(t)
	created := e.do(boot, "POST", "/v1/apis", entry)
	if created.status != 201 {
		t.Fatalf("create: %d %s", created.status, created.body)
	}
	js, cfg := bucketStream(t, e, registry.BucketAPIs)
	cfg.NoAck = true
	updateStream(t, js, cfg)
	changed := strings.Replace(entry, `"body":"ok"`, `"body":"late"`, 1)
	if r := e.do(boot, "PUT", "/v1/apis/orders.get", changed, "If-Match", created.header.Get("ETag")); r.status != 504 {
		t.Fatalf("put without an answer: %d %s; want 504", r.status, r.body)
	}
	natstest.CheckFor(t, 10*time.Second, 100*time.Millisecond, func() error {
		r := e.do(boot, "GET", "/v1/audit?kind=api", "")
		var out struct {
			Items []registry.Change `json:"items"`
		}
		if err := json.Unmarshal([]byte(r.body), &out); err != nil {
			return fmt.Errorf("%d %s: %v", r.status, r.body, err)
		}
		for _, ch := range out.Items {
			if ch.Key == "orders.get" && ch.Settled == registry.SettledReadBack {
				return nil
			}
		}
		return fmt.Errorf("no settled record: %s", r.body)
	})
}
