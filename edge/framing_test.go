package edge

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// framingServer serves, behind GuardFraming, a handler that answers like
// the edge does for framing: 400 for a conflicting request, and otherwise
// 200 naming the request and its body, closing after chunked requests.
func framingServer(t *testing.T) (addr string, seen func() []string) {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []string
	srv := &http.Server{
		ReadHeaderTimeout: 5 * time.Second,
		MaxHeaderBytes:    4096,
		ConnContext:       ConnContext,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if len(r.TransferEncoding) > 0 {
				w.Header().Set("Connection", "close")
				if conflictingFraming(r) {
					w.WriteHeader(http.StatusBadRequest)
					return
				}
			}
			body, _ := io.ReadAll(r.Body)
			mu.Lock()
			got = append(got, fmt.Sprintf("%s %s %q", r.Method, r.URL.Path, body))
			mu.Unlock()
		}),
	}
	go func() { _ = srv.Serve(GuardFraming(inner, srv.MaxHeaderBytes)) }()
	t.Cleanup(func() { srv.Close() })
	return inner.Addr().String(), func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), got...)
	}
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
	smuggle := "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n" +
		"3\r\nabc\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
	// A body that looks like a header block must not be taken for one.
	decoy := "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"
	cases := []struct {
		name   string
		raw    string
		want   []int
		served []string
	}{
		{"both lengths", smuggle, []int{400}, nil},
		{"both lengths, lower case", strings.Replace(smuggle, "Transfer-Encoding", "transfer-encoding", 1), []int{400}, nil},
		{"both lengths, bare LF", "POST /a HTTP/1.1\nHost: x\nContent-Length: 4\nTransfer-Encoding: chunked\n\n0\r\n\r\n", []int{400}, nil},
		{"both lengths after a good request",
			"GET /one HTTP/1.1\r\nHost: x\r\n\r\n" + smuggle, []int{200, 400}, []string{`GET /one ""`}},
		{"pipelined bodies that look like headers",
			fmt.Sprintf("POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%sGET /c HTTP/1.1\r\nHost: x\r\n\r\n", len(decoy), decoy) +
				"POST /d HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
			[]int{200, 200, 200}, []string{fmt.Sprintf("POST /b %q", decoy), `GET /c ""`, `POST /d "abc"`}},
		{"chunked alone", "POST /e HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", []int{200}, []string{`POST /e "abc"`}},
		{"header block over the limit", "GET /f HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 10000) + "\r\n\r\n", []int{431}, nil},
	}
	for _, tc := range cases {
		for _, chunk := range []int{0, 1, 7} {
			t.Run(fmt.Sprintf("%s/writes of %d", tc.name, chunk), func(t *testing.T) {
				addr, seen := framingServer(t)
				got := exchange(t, addr, tc.raw, chunk)
				if fmt.Sprint(got) != fmt.Sprint(tc.want) {
					t.Errorf("statuses %v, want %v", got, tc.want)
				}
				if s := seen(); fmt.Sprint(s) != fmt.Sprint(tc.served) {
					t.Errorf("handler saw %q, want %q", s, tc.served)
				}
			})
		}
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
		low := strings.ToLower(string(data))
		if c.conflict.Load() && !(strings.Contains(low, "content-length") && strings.Contains(low, "transfer-encoding")) {
			t.Fatalf("conflict marked in %q", data)
		}
	})
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
