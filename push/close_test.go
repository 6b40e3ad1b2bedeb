package push_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/jetway-gw/jetway/internal/jetwaytest"
	"github.com/jetway-gw/jetway/push"
)

// Close ends at once a connection whose write is blocked on a client that
// never reads, rather than at its write timeout or never.
func TestCloseWithBlockedWriter(t *testing.T) {
	g := jetwaytest.StartWith(t, jetwaytest.Options{Push: push.Options{WriteTimeout: 3 * time.Second}})
	g.PutTopic(topic)
	pub, shop := g.PutKeyedApp("pub"), g.PutKeyedApp("shop")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stuck, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(g.URL, "http")+"/_jetway/ws/orders", &websocket.DialOptions{HTTPHeader: http.Header{"X-Api-Key": {shop}}})
	if err != nil {
		t.Fatal(err)
	}
	defer stuck.CloseNow()
	natstestCheck(t, 5*time.Second, func() error {
		if st := g.Push.Stats(); st.Connections != 1 {
			return fmt.Errorf("%d", st.Connections)
		}
		return nil
	})
	pad := strings.Repeat("x", 200<<10)
	for range 150 {
		publish(t, g, pub, "", pad)
	}
	time.Sleep(300 * time.Millisecond) // the write is blocked now (janitor would cut it at ~3-4s)
	cctx, ccancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer ccancel()
	t0 := time.Now()
	if err := g.Push.Close(cctx); err != nil {
		t.Errorf("Close with a never-reading WS client: %v after %v (write timeout 3s); stats %+v", err, time.Since(t0), g.Push.Stats())
	}
}
