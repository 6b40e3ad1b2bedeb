// Command backend is the HTTP service every target of bench/run.sh proxies
// to, as cheap as net/http allows so that the figures measure the proxies:
//
//	GET  /hello  a fixed JSON body of about 60 bytes
//	POST /echo   the request body, echoed
//
// With --pprof it also serves Go's profiler at /debug/pprof/, which
// bench/cmd/idleconns reads the live heap from. With --grpc it also serves
// grpc-go's test service (internal/grpcdemo, reflection on) there, whose
// UnaryCall answers {"hostname":"hello from the bench backend"} to an empty
// request: the gRPC counterpart of GET /hello.
//
// Usage: backend --listen 127.0.0.1:9000 [--pprof] [--grpc 127.0.0.1:9001]
package main

import (
	"flag"
	"log"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/jetway-gw/jetway/bench/internal/benchsrv"
	"github.com/jetway-gw/jetway/internal/grpcdemo"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:9000", "address to listen on")
	withPprof := flag.Bool("pprof", false, "serve Go's profiler at /debug/pprof/")
	grpcAddr := flag.String("grpc", "", "also serve the gRPC test service on this address")
	flag.Parse()
	if *grpcAddr != "" {
		l, err := net.Listen("tcp", *grpcAddr)
		if err != nil {
			log.Fatal(err)
		}
		grpcdemo.Start(l, "hello from the bench backend")
		log.Printf("grpc backend listening on %s", *grpcAddr)
	}
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
