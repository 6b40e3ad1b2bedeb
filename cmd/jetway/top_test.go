package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/otel"
)

// top and metric fold what the nodes publish each second.
func TestTopAndMetric(t *testing.T) {
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-t.C:
				for i, node := range []string{"n1", "n2"} {
					rs := []otel.Record{{At: now.Truncate(time.Second), API: "orders.get", Node: node, Pass: 10, Block: int64(i), Success: 9, Error: 1,
						Avg: 2 * time.Millisecond, P50: 2 * time.Millisecond, P99: time.Duration(5+i) * time.Millisecond}}
					b, _ := json.Marshal(rs)
					nc.Publish(otel.MetricsSubjectPrefix+"edge."+node, b)
				}
			}
		}
	}()
	var out, errb bytes.Buffer
	if code := run([]string{"top", "--once", "--interval", "400ms", "--nats", s.ClientURL()}, strings.NewReader(""), &out, &errb); code != 0 {
		t.Fatalf("top: exit %d: %s", code, errb.String())
	}
	// The nodes' records of one second are summed; p99 is the slowest node's.
	line := ""
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(l, "orders.get") {
			line = strings.Join(strings.Fields(l), " ")
		}
	}
	if line == "" || !strings.Contains(line, " 10.0 ") || !strings.Contains(line, " 2ms 6ms ") || !strings.HasSuffix(line, " 2 - -") {
		t.Fatalf("top row %q in\n%s", line, out.String())
	}
	out.Reset()
	if code := run([]string{"metric", "orders.get", "--seconds", "1", "--nats", s.ClientURL()}, strings.NewReader(""), &out, &errb); code != 0 {
		t.Fatalf("metric: exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "|orders.get|n1|10|0|9|1|2.000|5.000") || !strings.Contains(out.String(), "|orders.get|n2|") {
		t.Fatalf("metric output:\n%s", out.String())
	}
}
