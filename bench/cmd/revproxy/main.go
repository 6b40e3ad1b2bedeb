// Command revproxy is Go's httputil.ReverseProxy, tuned as a good Go
// engineer would tune it (see benchsrv.ReverseProxy): the peer Jetway is
// measured against in bench/run.sh.
//
// Usage: revproxy --listen 127.0.0.1:9001 --target http://127.0.0.1:9000
package main

import (
	"flag"
	"log"
	"net/http"
	"net/url"
	"time"

	"github.com/jetway-gw/jetway/bench/internal/benchsrv"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:9001", "address to listen on")
	target := flag.String("target", "http://127.0.0.1:9000", "backend base URL")
	flag.Parse()
	u, err := url.Parse(*target)
	if err != nil || u.Scheme == "" || u.Host == "" {
		log.Fatalf("bad --target %q", *target)
	}
	srv := &http.Server{
		Addr:              *listen,
		Handler:           benchsrv.ReverseProxy(u),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
	log.Printf("revproxy listening on %s -> %s", *listen, u)
	log.Fatal(srv.ListenAndServe())
}
