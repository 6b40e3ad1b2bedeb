package edge

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/bus/natstest"
)

// framingServer serves a real Edge (no APIs: every request it serves gets
// 404) behind GuardFraming, configured as jetway serve configures it.
func framingServer(t *testing.T) string {
	t.Helper()
	e, err := New(Options{Conn: natstest.Connect(t, natstest.RunServer(t))})
	if err != nil {
		t.Fatal(err)
	}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler:                      e,
		ReadHeaderTimeout:            5 * time.Second,
		MaxHeaderBytes:               4096,
		ConnContext:                  ConnContext,
		DisableGeneralOptionsHandler: true,
	}
	go func() { _ = srv.Serve(GuardFraming(inner, srv.MaxHeaderBytes)) }()
	t.Cleanup(func() { srv.Close() })
	return inner.Addr().String()
}

// exchange writes raw in pieces of chunk bytes (0: all at once) and reads
// every response until the server closes.
func exchange(t *testing.T, addr, raw string, chunk int) []int {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	go func() {
		for rest := raw; len(rest) > 0; {
			n := len(rest)
			if chunk > 0 {
				n = min(chunk, n)
			}
			if _, err := io.WriteString(c, rest[:n]); err != nil {
				return
			}
			rest = rest[n:]
		}
		c.(*net.TCPConn).CloseWrite()
	}()
	var out []int
	br := bufio.NewReader(c)
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return out
		}
		_, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		out = append(out, resp.StatusCode)
	}
}

func TestGuardFraming(t *testing.T) {
	smuggled := "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
	smuggle := "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n" +
		"3\r\nabc\r\n0\r\n\r\n" + smuggled
	// A body that looks like a header block must not be taken for one.
	decoy := "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"
	// 404: served by the edge (it has no APIs); 400: refused.
	cases := []struct {
		name string
		raw  string
		want []int
	}{
		{"both lengths", smuggle, []int{400}},
		{"both lengths, lower case", strings.Replace(smuggle, "Transfer-Encoding", "transfer-encoding", 1), []int{400}},
		{"both lengths, bare LF", "POST /a HTTP/1.1\nHost: x\nContent-Length: 4\nTransfer-Encoding: chunked\n\n0\r\n\r\n" + smuggled, []int{400}},
		{"both lengths after a good request", "GET /one HTTP/1.1\r\nHost: x\r\n\r\n" + smuggle, []int{404, 400}},
		{"both lengths on OPTIONS *", strings.Replace(smuggle, "POST /a", "OPTIONS *", 1), []int{400}},
		{"HTTP/1.0 with both", "POST /a HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n" + smuggled, []int{400}},
		{"HTTP/1.0 chunked", "POST /a HTTP/1.0\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled, []int{400}},
		{"after an upgrade request", "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n" + smuggle, []int{404, 400}},
		{"after a length with leading zeros", "POST /z HTTP/1.1\r\nHost: x\r\nContent-Length: 0000000000000000002\r\n\r\nab" + smuggle, []int{404, 400}},
		{"a length too long to follow", "POST /z HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\nab" + smuggled, []int{400}},
		{"pipelined bodies that look like headers",
			fmt.Sprintf("POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%sGET /c HTTP/1.1\r\nHost: x\r\n\r\n", len(decoy), decoy) +
				"POST /d HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n" + smuggled,
			[]int{404, 404, 404}},
		{"header block over the limit", "GET /f HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 10000) + "\r\n\r\n", []int{431}},
	}
	for _, tc := range cases {
		for _, chunk := range []int{0, 1, 7} {
			t.Run(fmt.Sprintf("%s/writes of %d", tc.name, chunk), func(t *testing.T) {
				if got := exchange(t, framingServer(t), tc.raw, chunk); fmt.Sprint(got) != fmt.Sprint(tc.want) {
					t.Errorf("statuses %v, want %v", got, tc.want)
				}
			})
		}
	}
}

// TestGuardFramingMemory: an idle connection does not keep the buffers of
// a big header block.
func TestGuardFramingMemory(t *testing.T) {
	big := "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 60<<10) + "\r\n\r\n"
	c := &framingConn{Conn: &chunkConn{data: []byte(big), n: 4096}, max: 1 << 20}
	buf := make([]byte, 4096)
	for {
		if _, err := c.Read(buf); err != nil {
			break
		}
	}
	if cap(c.hdr) > keepBuf || cap(c.out) > keepBuf {
		t.Fatalf("idle connection keeps %d + %d bytes", cap(c.hdr), cap(c.out))
	}
}

func TestBlockEnd(t *testing.T) {
	for in, want := range map[string]int{
		"GET / HTTP/1.1\r\nHost: x\r\n\r\nrest": 27,
		"GET / HTTP/1.1\nHost: x\n\nrest":       24,
		"GET / HTTP/1.1\r\nHost: x\r\n":         -1,
		"GET / HTTP/1.1\r\nHost: x\r\n\r":       -1,
	} {
		if got := blockEnd([]byte(in), 0); got != want {
			t.Errorf("blockEnd(%q) = %d, want %d", in, got, want)
		}
	}
}

// chunkConn is a net.Conn whose reads return data in pieces of n bytes.
type chunkConn struct {
	net.Conn
	data []byte
	n    int
}

func (c *chunkConn) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.data[:min(c.n, len(c.data))])
	c.data = c.data[n:]
	return n, nil
}

// FuzzFraming: whatever arrives and however it is split, the guard hands
// the server exactly the bytes it read, in order, and marks a conflict only
// when both headers were there.
func FuzzFraming(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), 3, 5)
	f.Add([]byte("POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"), 1, 7)
	f.Add([]byte("POST /b HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloGET /c HTTP/1.1\r\n\r\n"), 4096, 4096)
	f.Add([]byte("POST /b HTTP/1.1\nContent-Length: 99999999999999999999\n\n"), 2, 1)
	f.Add([]byte("GET / HTTP/1.1\r\nUpgrade: websocket\r\n\r\n\x81\x05hello"), 10, 3)
	f.Fuzz(func(t *testing.T, data []byte, readSize, bufSize int) {
		readSize, bufSize = 1+abs(readSize)%8192, 1+abs(bufSize)%8192
		c := &framingConn{Conn: &chunkConn{data: append([]byte(nil), data...), n: readSize}, max: 1 << 16}
		var out []byte
		buf := make([]byte, bufSize)
		for {
			n, err := c.Read(buf)
			out = append(out, buf[:n]...)
			if err != nil {
				break
			}
		}
		if string(out) != string(data) {
			t.Fatalf("the guard changed the stream:\nin  %q\nout %q", data, out)
		}
		if c.badAt.Load() != 0 && !strings.Contains(strings.ToLower(string(data)), "transfer-encoding") {
			t.Fatalf("ambiguous framing marked in %q", data)
		}
	})
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
