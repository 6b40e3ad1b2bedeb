// Command backend is the HTTP service every target of bench/run.sh proxies
// to, as cheap as net/http allows so that the figures measure the proxies:
//
//	GET  /hello  a fixed JSON body of about 60 bytes
//	POST /echo   the request body, echoed
//
// Usage: backend --listen 127.0.0.1:9000
package main

import (
	"flag"
	"log"
	"net/http"
	"time"

	"github.com/jetway-gw/jetway/bench/internal/benchsrv"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:9000", "address to listen on")
	flag.Parse()
	srv := &http.Server{
		Addr:              *listen,
		Handler:           benchsrv.Backend(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
	}
	log.Printf("backend listening on %s", *listen)
	log.Fatal(srv.ListenAndServe())
}
