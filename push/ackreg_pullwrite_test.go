package push_test

import (
	"fmt"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/internal/jetwaytest"
	"github.com/jetway-gw/jetway/push"
)

// Regression (review of the acks): a pull's answer is written after Pull has closed its session
// (and released its admission slot), with no write deadline: a client
// that never reads it holds the handler, its goroutine and the encoded
// answer (here ~6 MB: 1 MB of '<', HTML-escaped by encoding/json) for
// ever, and is not counted against MaxConnsPerIP, so such pulls pile up
// without bound. SSE, WebSocket and TCP writes are cut after WriteTimeout.
func TestAckRegressPullAnswerToANonReader(t *testing.T) {
	g := jetwaytest.StartWith(t, jetwaytest.Options{Push: push.Options{WriteTimeout: time.Second, MaxConnsPerIP: 2}})
	g.PutTopic(topic)
	pub, shop := g.PutKeyedApp("pub"), g.PutKeyedApp("shop")
	publish(t, g, pub, "", strings.Repeat("<", 1_000_000))
	host := strings.TrimPrefix(g.URL, "http://")
	const pulls = 6
	for i := 0; i < pulls; i++ {
		c, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.(*net.TCPConn).SetReadBuffer(4096)
		fmt.Fprintf(c, "GET /_jetway/pull/orders?from=0&device=d%d HTTP/1.1\r\nHost: x\r\nX-Api-Key: %s\r\n\r\n", i, shop)
		time.Sleep(100 * time.Millisecond) // never read
	}
	time.Sleep(4 * time.Second) // 4 write timeouts
	buf := make([]byte, 8<<20)
	stacks := string(buf[:runtime.Stack(buf, true)])
	stuck := 0
	for _, s := range strings.Split(stacks, "\n\n") {
		if strings.Contains(s, "edge.(*Edge).pull(") {
			stuck++
		}
	}
	if stuck > 0 {
		t.Errorf("%d pull handlers still writing their answer 4 write timeouts on (push connections counted: %d, cap per IP 2)", stuck, g.Push.Stats().Connections)
	}
}
