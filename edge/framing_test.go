package edge

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/textproto"
	"reflect"
	"strings"
	"sync"
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

		// After a POST, Go's server drops up to four CR or LF bytes before
		// the next request line; they are not a request of their own.
		{"the issue's stray LFs after a POST", issue18, []int{404, 400}},
		{"one LF after a POST", strayAfter(postA, "\n"), []int{404, 400}},
		{"CRLF after a POST", strayAfter(postA, "\r\n"), []int{404, 400}},
		{"three LFs after a POST", strayAfter(postA, "\n\n\n"), []int{404, 400}},
		{"CRLF LF after a POST", strayAfter(postA, "\r\n\n"), []int{404, 400}},
		{"CRLFCRLF after a POST", strayAfter(postA, "\r\n\r\n"), []int{404, 400}},
		{"LF CRLF CR after a POST", strayAfter(postA, "\n\r\n\r"), []int{404, 400}},
		{"bare CRs after a POST", strayAfter(postA, "\r\r\r\r"), []int{404, 400}},
		{"CRLFCRLF after a POST with no body", strayAfter("POST /a HTTP/1.1\r\nHost: x\r\n\r\n", "\r\n\r\n"), []int{404, 400}},
		{"LFs after a POST, then a good request", postA + "\n\n\n\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n", []int{404, 404}},
		// Five are one too many: the server refuses the empty request line.
		{"five LFs after a POST", strayAfter(postA, "\n\n\n\n\n"), []int{404, 400}},
		// Only after a POST (exactly: the server compares the method as sent).
		{"LFs after a GET", strayAfter("GET /a HTTP/1.1\r\nHost: x\r\n\r\n", "\n\n"), []int{404, 400}},
		{"CRLF after a GET", strayAfter("GET /a HTTP/1.1\r\nHost: x\r\n\r\n", "\r\n"), []int{404, 400}},
		{"LFs after a lower-case post", strayAfter(strings.Replace(postA, "POST", "post", 1), "\n\n"), []int{404, 400}},
		{"LFs before the first request", strayAfter("", "\n\n"), []int{400}},
		// The server joins a folded line to the field before it; the guard
		// does not follow the join and watches no further.
		{"a folded header line", "GET /a HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n", []int{404}},
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

// issue18 is the stream from issue 18 that desynchronised the guard: the
// stray LFs after the first POST made it count two empty blocks, so the
// HTTP/1.0 request with both lengths was served and the GET behind it too.
const issue18 = "POST /pub/a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello\n\n\n\n" +
	"POST /pub/b HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n" +
	"helloGET /pub/SMUG HTTP/1.1\r\nHost: x\r\n\r\n"

// postA is a POST with a body, served by the edge (404).
const postA = "POST /pub/a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"

// strayAfter is first, the stray bytes, then a request with both lengths
// (to be refused) and one hidden behind it by its Content-Length.
func strayAfter(first, stray string) string {
	return first + stray +
		"POST /pub/b HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n" +
		"helloGET /pub/SMUG HTTP/1.1\r\nHost: x\r\n\r\n"
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

// TestGuardFramingAllocs: the watch allocates nothing per request, stray
// line ends after a POST included.
func TestGuardFramingAllocs(t *testing.T) {
	pair := postA + "\r\n" + "GET /b HTTP/1.1\r\nHost: x\r\n\r\n"
	buf := make([]byte, 4096)
	run := func(n int) float64 {
		data := []byte(strings.Repeat(pair, n))
		return testing.AllocsPerRun(5, func() {
			c := &framingConn{Conn: &chunkConn{data: data, n: 700}, max: 1 << 16}
			for {
				if _, err := c.Read(buf); err != nil {
					break
				}
			}
		})
	}
	// A buffer may grow once more on the longer stream; per request is 1000s.
	if few, many := run(10), run(1000); many > few+2 {
		t.Errorf("%v allocations for 10 pairs of requests, %v for 1000", few, many)
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
// the server exactly the bytes it read, in order, and marks a block refused
// only when it had a Transfer-Encoding or was handed over unchecked.
func FuzzFraming(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), 3, 5)
	f.Add([]byte("POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"), 1, 7)
	f.Add([]byte("POST /b HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloGET /c HTTP/1.1\r\n\r\n"), 4096, 4096)
	f.Add([]byte("POST /b HTTP/1.1\nContent-Length: 99999999999999999999\n\n"), 2, 1)
	f.Add([]byte("GET / HTTP/1.1\r\nUpgrade: websocket\r\n\r\n\x81\x05hello"), 10, 3)
	f.Fuzz(func(t *testing.T, data []byte, readSize, bufSize int) {
		readSize, bufSize = 1+abs(readSize)%8192, 1+abs(bufSize)%8192
		var blocks [][]byte
		c := &framingConn{Conn: &chunkConn{data: append([]byte(nil), data...), n: readSize}, max: 1 << 16}
		c.onBlock = func(b []byte) { blocks = append(blocks, bytes.Clone(b)) }
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
		if bad := c.badAt.Load(); bad != 0 {
			if b := blocks[bad-1]; b != nil && !strings.Contains(strings.ToLower(string(b)), "transfer-encoding") {
				t.Fatalf("block %d %q marked refused in %q", bad, b, data)
			}
		}
	})
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// FuzzFramingServer is differential: the fuzzed stream goes through the
// guard into a real http.Server, and for every request the server hands to
// the handler, the guard's numbering must agree with the server's framing.
// The handler acts as Edge.ServeHTTP does on the verdict and checks that
//   - the block the verdict numbers is the one the server parsed (same
//     request line and header fields), unless the verdict refuses it;
//   - a block with both Content-Length and Transfer-Encoding (or
//     Transfer-Encoding on HTTP/1.0), as the server's own header parser
//     reads it, is refused;
//   - no request is served after the one the watch ended at;
//   - only a block with a Transfer-Encoding, or one the guard handed over
//     unchecked, is refused.
func FuzzFramingServer(f *testing.F) {
	f.Add([]byte(issue18), 4096)
	f.Add([]byte(issue18), 7)
	f.Add([]byte(strayAfter(postA, "\r\n\r\n")), 1)
	f.Add([]byte(strayAfter("POST /a HTTP/1.1\r\nHost: x\r\n\r\n", "\n\r\n\r")), 3)
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n"), 5)
	f.Add([]byte("POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET /s HTTP/1.1\r\nHost: x\r\n\r\n"), 7)
	f.Add([]byte("POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhelloGET /c HTTP/1.1\r\nHost: x\r\n\r\n"), 4096)
	f.Add([]byte("POST /b HTTP/1.1\nHost: x\nContent-Length: 99999999999999999999\n\n"), 2)
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\r\n\x81\x05hello"), 10)
	f.Add([]byte("GET /a HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n"), 9)
	f.Add([]byte("POST /a HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\nContent-Length: 3\r\n\r\nabcPOST /b HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi\r\n"), 4096)
	f.Fuzz(func(t *testing.T, data []byte, readSize int) {
		readSize = 1 + abs(readSize)%4096
		var (
			mu       sync.Mutex
			blocks   [][]byte // what the guard handed over, by number
			problems []string
		)
		conn := newScriptConn(data, readSize)
		srv := &http.Server{
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				refuse, closeAfter := framingVerdict(r)
				fc := r.Context().Value(framingKey{}).(*framingConn)
				n := fc.served.Load()
				mu.Lock()
				if p := judgeServed(n, refuse, fc.offAt.Load(), blocks, r); p != "" {
					problems = append(problems, p)
				}
				mu.Unlock()
				if refuse || closeAfter || len(r.TransferEncoding) > 0 {
					w.Header()["Connection"] = []string{"close"}
				}
				if refuse {
					w.WriteHeader(http.StatusBadRequest)
					return
				}
				if _, err := io.Copy(io.Discard, r.Body); err != nil {
					conn.finish() // the stream ran out inside the body
				}
			}),
			MaxHeaderBytes: 1 << 16,
			ConnContext: func(ctx context.Context, c net.Conn) context.Context {
				c.(*framingConn).onBlock = func(b []byte) {
					mu.Lock()
					defer mu.Unlock()
					blocks = append(blocks, bytes.Clone(b))
				}
				return ConnContext(ctx, c)
			},
			DisableGeneralOptionsHandler: true,
			ErrorLog:                     log.New(io.Discard, "", 0),
		}
		l := &oneConnListener{conns: make(chan net.Conn, 1), done: make(chan struct{})}
		l.conns <- conn
		go func() { _ = srv.Serve(GuardFraming(l, srv.MaxHeaderBytes)) }()
		select {
		case <-conn.done:
		case <-time.After(10 * time.Second):
			t.Fatalf("the server did not finish with %q", data)
		}
		srv.Close()
		mu.Lock()
		defer mu.Unlock()
		if len(problems) > 0 {
			t.Fatalf("%s\nstream %q", strings.Join(problems, "\n"), data)
		}
	})
}

// judgeServed says what is wrong with the server serving r as request n of
// its connection, given the guard's verdict and the blocks it handed over.
func judgeServed(n int64, refuse bool, offAt int64, blocks [][]byte, r *http.Request) string {
	got := r.Method + " " + r.RequestURI + " " + r.Proto
	if offAt != 0 && n > offAt {
		return fmt.Sprintf("request %d (%s) served after the watch ended at block %d", n, got, offAt)
	}
	if n > int64(len(blocks)) {
		if refuse {
			return ""
		}
		return fmt.Sprintf("request %d (%s) served, the guard handed over %d blocks", n, got, len(blocks))
	}
	block := blocks[n-1]
	if block == nil {
		if !refuse {
			return fmt.Sprintf("request %d (%s) served from a block the guard did not check", n, got)
		}
		return ""
	}
	if refuse && !bytes.Contains(bytes.ToLower(block), []byte("transfer-encoding")) {
		return fmt.Sprintf("request %d (%s) refused, its block %q has no Transfer-Encoding", n, got, block)
	}
	if refuse {
		return ""
	}
	// The server's own parser on the guard's block must give r.
	want, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(block)))
	if err != nil {
		return fmt.Sprintf("request %d (%s) served, block %d %q does not parse: %v", n, got, n, block, err)
	}
	delete(want.Header, "Host") // as the server does
	if line := want.Method + " " + want.RequestURI + " " + want.Proto; line != got || !reflect.DeepEqual(want.Header, r.Header) {
		return fmt.Sprintf("request %d served is %s %v, block %d is %s %v", n, got, r.Header, n, line, want.Header)
	}
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(block)))
	_, _ = tp.ReadLine()
	h, _ := tp.ReadMIMEHeader()
	if _, te := h["Transfer-Encoding"]; te {
		if _, cl := h["Content-Length"]; cl || r.Proto == "HTTP/1.0" {
			return fmt.Sprintf("request %d (%s) served with ambiguous framing: %q", n, got, block)
		}
	}
	return ""
}

// scriptConn is a net.Conn that reads data in pieces of n bytes, then
// io.EOF, and discards what is written. done is closed once the server can
// serve nothing more: the connection is closed, a response said
// "Connection: close" (the server may linger half a second before closing),
// or a body ran into the end of data.
type scriptConn struct {
	data    []byte
	n       int
	written []byte
	done    chan struct{}
	once    sync.Once
}

func newScriptConn(data []byte, n int) *scriptConn {
	return &scriptConn{data: data, n: n, done: make(chan struct{})}
}

func (c *scriptConn) finish() { c.once.Do(func() { close(c.done) }) }

func (c *scriptConn) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.data[:min(c.n, len(c.data))])
	c.data = c.data[n:]
	return n, nil
}

func (c *scriptConn) Write(p []byte) (int, error) {
	c.written = append(c.written, p...)
	if bytes.Contains(c.written, []byte("\r\nConnection: close\r\n")) {
		c.finish()
	}
	return len(p), nil
}

func (c *scriptConn) Close() error                     { c.finish(); return nil }
func (c *scriptConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *scriptConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *scriptConn) SetDeadline(time.Time) error      { return nil }
func (c *scriptConn) SetReadDeadline(time.Time) error  { return nil }
func (c *scriptConn) SetWriteDeadline(time.Time) error { return nil }

// oneConnListener hands out its connections, then waits to be closed.
type oneConnListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *oneConnListener) Close() error   { l.once.Do(func() { close(l.done) }); return nil }
func (l *oneConnListener) Addr() net.Addr { return &net.TCPAddr{} }
