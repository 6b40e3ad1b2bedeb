// Package benchsrv holds what the benchmark commands and bench_test.go
// share: the backend handler, the tuned reverse proxy that Jetway is
// compared with, and the tuned HTTP client that drives every target.
package benchsrv

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// Hello is the body of the backend's GET /hello (about 60 bytes).
var Hello = []byte(`{"message":"hello from the bench backend","ok":true,"n":42}` + "\n")

var echoPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// Backend is the benchmark backend: as cheap as net/http allows, so that the
// figures measure what sits in front of it.
//
//	GET  /hello  Hello, as application/json
//	POST /echo   the request body, echoed
func Backend() http.Handler {
	helloLen := []string{strconv.Itoa(len(Hello))}
	ctJSON := []string{"application/json"}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/hello" && (r.Method == http.MethodGet || r.Method == http.MethodHead):
			h := w.Header()
			h["Content-Type"] = ctJSON
			h["Content-Length"] = helloLen
			_, _ = w.Write(Hello)
		case r.URL.Path == "/echo" && r.Method == http.MethodPost:
			buf := echoPool.Get().(*bytes.Buffer)
			buf.Reset()
			defer echoPool.Put(buf)
			if _, err := buf.ReadFrom(io.LimitReader(r.Body, 8<<20)); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			h := w.Header()
			if ct := r.Header["Content-Type"]; len(ct) > 0 {
				h["Content-Type"] = ct
			}
			h["Content-Length"] = []string{strconv.Itoa(buf.Len())}
			_, _ = w.Write(buf.Bytes())
		default:
			http.NotFound(w, r)
		}
	})
}

// Transport is an HTTP transport tuned the way a proxy or a load generator
// should be: plenty of idle keep-alive connections per host (the default of
// 2 makes every burst dial anew), no transparent compression, no proxy from
// the environment.
func Transport() *http.Transport {
	return &http.Transport{
		Proxy: nil,
		DialContext: (&net.Dialer{
			Timeout:   3 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		MaxIdleConns:        8192,
		MaxIdleConnsPerHost: 1024,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
		ReadBufferSize:      32 << 10,
		WriteBufferSize:     32 << 10,
	}
}

// Client is the HTTP client every benchmark drives its target with.
func Client() *http.Client {
	return &http.Client{Transport: Transport()}
}

// bufferPool lends httputil.ReverseProxy its copy buffers.
type bufferPool struct{ p sync.Pool }

func newBufferPool() *bufferPool {
	return &bufferPool{p: sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}}
}

func (b *bufferPool) Get() []byte  { return *(b.p.Get().(*[]byte)) }
func (b *bufferPool) Put(x []byte) { b.p.Put(&x) }

// ReverseProxy is Go's httputil.ReverseProxy to target, tuned: the Transport
// above and pooled copy buffers. It sets X-Forwarded-For/Host/Proto, as the
// Jetway edge does.
func ReverseProxy(target *url.URL) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.SetXForwarded()
		},
		Transport:  Transport(),
		BufferPool: newBufferPool(),
	}
}
