package workers_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/internal/jetwaytest"
)

// requestAll sends a NATS services request and collects every answer that
// comes within wait, as `nats micro` does.
func requestAll(t *testing.T, nc *nats.Conn, subject string, wait time.Duration) [][]byte {
	t.Helper()
	inbox := nats.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest(subject, inbox, nil); err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for {
		m, err := sub.NextMsg(wait)
		if err != nil {
			return out
		}
		out = append(out, m.Data)
	}
}

// The workers answer `nats micro ls/info/stats` as instances of Jetway's
// service, with one endpoint per API and its counts.
func TestWorkersAnswerTheServicesProtocol(t *testing.T) {
	g := jetwaytest.Start(t, "orders")
	g.AddWorker("orders")
	g.Publish(`{"name":"orders.get","pool":"orders","route":{"path":"/o"},"backend":{"type":"mock","body":"ok"}}`)
	g.Publish(`{"name":"orders.fail","pool":"orders","route":{"path":"/f"},"backend":{"type":"mock","status":503}}`)
	for i := 0; i < 3; i++ {
		g.Do("GET", "/o", nil)
	}
	g.Do("GET", "/f", nil)

	name := bus.ServiceName
	pings := requestAll(t, g.Conn, "$SRV.PING", 300*time.Millisecond)
	ids := map[string]bool{}
	for _, b := range pings {
		var p micro.Ping
		if err := json.Unmarshal(b, &p); err != nil || p.Type != micro.PingResponseType {
			t.Fatalf("ping answer %s: %v", b, err)
		}
		if p.Name == name {
			ids[p.ID] = true
		}
	}
	if len(ids) != 2 {
		t.Fatalf("%d instances of %s answered PING, want the 2 workers: %s", len(ids), name, pings)
	}

	infos := requestAll(t, g.Conn, "$SRV.INFO."+name, 300*time.Millisecond)
	if len(infos) != 2 {
		t.Fatalf("%d INFO answers", len(infos))
	}
	var info micro.Info
	if err := json.Unmarshal(infos[0], &info); err != nil || info.Type != micro.InfoResponseType || len(info.Endpoints) != 2 {
		t.Fatalf("info %s: %v", infos[0], err)
	}
	if e := info.Endpoints[0]; e.Name != "orders.fail" || e.Subject != bus.APISubject("orders", "orders.fail") || e.QueueGroup != bus.QueueGroup("orders") {
		t.Errorf("endpoint %+v", e)
	}

	var requests, errs int
	for _, b := range requestAll(t, g.Conn, "$SRV.STATS."+name, 300*time.Millisecond) {
		var st micro.Stats
		if err := json.Unmarshal(b, &st); err != nil || st.Type != micro.StatsResponseType {
			t.Fatalf("stats %s: %v", b, err)
		}
		for _, e := range st.Endpoints {
			requests += e.NumRequests
			errs += e.NumErrors
			if e.Name == "orders.fail" && e.NumRequests > 0 && !strings.Contains(e.LastError, "503") {
				t.Errorf("last error %q", e.LastError)
			}
			if e.NumRequests > 0 && e.AverageProcessingTime <= 0 {
				t.Errorf("endpoint %s: no processing time", e.Name)
			}
		}
	}
	if requests != 4 || errs != 1 {
		t.Fatalf("stats over the pool: %d requests, %d errors; want 4 and 1", requests, errs)
	}
	// An instance asked by its id answers alone; another service's name
	// gets no answer from Jetway.
	for id := range ids {
		if got := requestAll(t, g.Conn, "$SRV.PING."+name+"."+id, 200*time.Millisecond); len(got) != 1 {
			t.Fatalf("PING by id: %d answers", len(got))
		}
		break
	}
	if got := requestAll(t, g.Conn, "$SRV.PING.someone-else", 200*time.Millisecond); len(got) != 0 {
		t.Fatalf("PING of another service: %s", got)
	}
}
