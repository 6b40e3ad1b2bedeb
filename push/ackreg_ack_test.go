package push_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/jetway-gw/jetway/internal/jetwaytest"
)

// Regression (review of the acks): a client that resumes with after=C has message C; acking C (or
// anything before it) is an ack of a message it was sent. Sent right
// after the connect frame — before the edge's first write stored
// sb.cursor — it is refused with 1008 and the connection is closed.
func TestAckRegressAckOfStartCursorBeforeReady(t *testing.T) {
	t.Run("tcp", func(t *testing.T) {
		g, pub, shop := start(t)
		addr := jetwaytest.ServeTCP(t, g.Edge)
		one := publish(t, g, pub, "", "one")
		publish(t, g, pub, "", "two")
		for i := 0; i < 5; i++ {
			r := dialRaw(t, addr)
			r.connect("/_jetway/tcp/orders?after="+one, map[string]string{"X-Api-Key": shop})
			r.send(`{"type":"ack","cursor":"` + one + `"}`)
			for {
				f := r.read()
				if f == nil {
					t.Fatalf("round %d: the edge closed the connection without a close frame", i)
				}
				if f["type"] == "close" {
					t.Fatalf("round %d: an ack of the start cursor %s closed the connection: %v", i, one, f)
				}
				if f["type"] == "message" {
					break
				}
			}
			r.c.Close()
		}
	})
	t.Run("ws", func(t *testing.T) {
		g, pub, shop := start(t)
		one := publish(t, g, pub, "", "one")
		publish(t, g, pub, "", "two")
		for i := 0; i < 5; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(g.URL, "http")+"/_jetway/ws/orders?after="+one, &websocket.DialOptions{HTTPHeader: http.Header{"X-Api-Key": {shop}}})
			if err != nil {
				t.Fatal(err)
			}
			if err := ws.Write(ctx, websocket.MessageText, []byte(`{"type":"ack","cursor":"`+one+`"}`)); err != nil {
				t.Fatal(err)
			}
			for {
				_, b, err := ws.Read(ctx)
				if err != nil {
					t.Fatalf("round %d: an ack of the start cursor %s closed the connection: %v", i, one, err)
				}
				if strings.Contains(string(b), `"type":"message"`) {
					break
				}
			}
			ws.CloseNow()
			cancel()
		}
	})
}
