// Command backend is the HTTP service every target of bench/run.sh proxies
// to, as cheap as net/http allows so that the figures measure the proxies:
//
//	GET  /hello  a fixed JSON body of about 60 bytes
//	POST /echo   the request body, echoed
//
// With --pprof it also serves Go's profiler at /debug/pprof/, which
// bench/cmd/idleconns reads the live heap from.
//
// Usage: backend --listen 127.0.0.1:9000 [--pprof]
package main

import (
	"flag"
	"log"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/jetway-gw/jetway/bench/internal/benchsrv"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:9000", "address to listen on")
	withPprof := flag.Bool("pprof", false, "serve Go's profiler at /debug/pprof/")
	flag.Parse()
	h := benchsrv.Backend()
	if *withPprof {
		mux := http.NewServeMux()
		mux.Handle("/", h)
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		h = mux
	}
	srv := &http.Server{
		Addr:              *listen,
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
	}
	log.Printf("backend listening on %s", *listen)
	log.Fatal(srv.ListenAndServe())
}
