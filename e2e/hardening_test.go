package e2e

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A client that sends its headers too slowly is cut off at
// --read-header-timeout, while others are served; connections past
// --max-conns are refused.
func TestSlowClientsCutOff(t *testing.T) {
	t.Parallel()
	srv := startNode(t, "serve", "serve", "", "--read-header-timeout", "300ms", "--max-conns", "8")
	srv.waitReady(t)
	putAPI(t, srv.natsURL, entry("hard.ok", "hard", "GET", "/v1/hard", mockBackend("fine"), nil))
	waitBody(t, srv.edge+"/v1/hard", "fine")
	addr := strings.TrimPrefix(srv.edge, "http://")

	slow, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	if _, err := io.WriteString(slow, "GET /v1/hard HTTP/1.1\r\nHost: x\r\n"); err != nil { // never finishes
		t.Fatal(err)
	}
	start := time.Now()
	slow.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, _ = io.ReadAll(slow) // the server closes (after a 408, or without a word)
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("a slow client held its connection for %v", took)
	}
	if r := get(t, srv.edge+"/v1/hard"); r.status != http.StatusOK {
		t.Fatalf("a normal client during the slow one: %v", r)
	}

	// Hold connections open, each with a request served on it, until the
	// edge refuses one: that must happen by the cap (8) plus the few the
	// test's own client keeps.
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for i := 0; ; i++ {
		if i == 12 {
			t.Fatalf("%d connections served with --max-conns 8", i)
		}
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return // refused at connect: fine too
		}
		held = append(held, c)
		io.WriteString(c, "GET /v1/hard HTTP/1.1\r\nHost: x\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		buf := make([]byte, 512)
		n, _ := io.ReadAtLeast(c, buf, 12)
		if !strings.Contains(string(buf[:n]), "200 OK") {
			return // refused: the cap holds
		}
	}
}
