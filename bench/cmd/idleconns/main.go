// Command idleconns measures what an idle keep-alive client connection
// costs a server: it reads the server's resident memory (VmRSS of --pid),
// opens --conns connections, sends one GET on each and reads its answer,
// leaves them all open and idle for --settle, reads the memory again and
// prints the difference per connection. bench/run.sh runs it against the
// bare net/http backend and against the edge in the same run.
//
// RSS also holds what the requests left behind: garbage the GC has freed
// but the runtime has not given back (a Go heap is returned to the OS only
// slowly, and not while it is below the GC's goal). With --pprof (the
// server's /debug/pprof/ base URL) it also reports what the connections
// keep alive: heap in use plus goroutine stacks, each read after a forced
// GC (/debug/pprof/heap?gc=1&debug=1), before and after.
//
// Usage: idleconns --url http://127.0.0.1:8080/hello --pid 1234 [--pprof http://127.0.0.1:9090/debug/pprof/] [--conns 5000] [--settle 5s]
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

func main() {
	target := flag.String("url", "", "the URL to GET on every connection")
	pid := flag.Int("pid", 0, "the server's process id (its VmRSS is measured)")
	conns := flag.Int("conns", 5000, "connections to hold")
	settle := flag.Duration("settle", 5*time.Second, "how long the connections idle before the second measurement")
	prof := flag.String("pprof", "", "the server's /debug/pprof/ base URL: also report live memory per connection")
	flag.Parse()
	u, err := url.Parse(*target)
	if err != nil || u.Host == "" || *pid <= 0 || *conns <= 0 {
		fmt.Fprintln(os.Stderr, "usage: idleconns --url http://host:port/path --pid PID [--conns N] [--settle D]")
		os.Exit(2)
	}
	before, err := rss(*pid)
	if err != nil {
		fail(err)
	}
	var liveBefore int64
	if *prof != "" {
		if liveBefore, err = live(*prof); err != nil {
			fail(err)
		}
	}
	held, err := open(u, *conns)
	if err != nil {
		fail(err)
	}
	time.Sleep(*settle)
	after, err := rss(*pid)
	if err != nil {
		fail(err)
	}
	line := fmt.Sprintf("conns=%d rss_before_kib=%d rss_after_kib=%d per_conn_bytes=%.0f", len(held), before/1024, after/1024, float64(after-before)/float64(len(held)))
	if *prof != "" {
		liveAfter, err := live(*prof)
		if err != nil {
			fail(err)
		}
		line += fmt.Sprintf(" live_per_conn_bytes=%.0f", float64(liveAfter-liveBefore)/float64(len(held)))
	}
	for _, c := range held {
		_ = c.Close()
	}
	fmt.Println(line)
}

// live is the heap in use plus the goroutine stacks of the server behind
// the pprof base URL, after a GC it forces.
func live(base string) (int64, error) {
	resp, err := http.Get(strings.TrimSuffix(base, "/") + "/heap?gc=1&debug=1")
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	var heap, stack int64 = -1, -1
	for _, l := range strings.Split(string(b), "\n") {
		switch f := strings.Fields(l); {
		case len(f) >= 4 && f[0] == "#" && f[1] == "HeapAlloc":
			heap, _ = strconv.ParseInt(f[3], 10, 64)
		case len(f) >= 4 && f[0] == "#" && f[1] == "Stack":
			stack, _ = strconv.ParseInt(f[3], 10, 64)
		}
	}
	if heap < 0 || stack < 0 {
		return 0, fmt.Errorf("%s: no HeapAlloc and Stack in the heap profile", base)
	}
	return heap + stack, nil
}

// open dials n connections (64 at a time), each answering one GET.
func open(u *url.URL, n int) ([]net.Conn, error) {
	req := "GET " + u.RequestURI() + " HTTP/1.1\r\nHost: " + u.Host + "\r\n\r\n"
	out := make([]net.Conn, n)
	errs := make(chan error, n)
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			c, err := net.DialTimeout("tcp", u.Host, 10*time.Second)
			if err != nil {
				errs <- err
				return
			}
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			if _, err := io.WriteString(c, req); err != nil {
				errs <- err
				return
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				errs <- err
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				errs <- fmt.Errorf("GET %s: %s", u, resp.Status)
				return
			}
			_ = c.SetDeadline(time.Time{})
			out[i] = c
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	return out, nil
}

// rss is a process's resident set size in bytes.
func rss(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kib, err := strconv.ParseInt(f[1], 10, 64)
			return kib * 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "idleconns:", err)
	os.Exit(1)
}
