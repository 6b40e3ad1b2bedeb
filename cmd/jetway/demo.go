package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/jetway-gw/jetway/internal/grpcdemo"
	"github.com/jetway-gw/jetway/push"
	"github.com/jetway-gw/jetway/registry"
)

// startDemo runs a small demo backend on a free loopback port and publishes
// the demo.* APIs that point at it, so the quick start can be tried with
// curl at once. The entries are rewritten at every start (the port changes).
func startDemo(ctx context.Context, nc *nats.Conn, w *registry.Watcher, log *slog.Logger, edgeURL string) (stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("demo backend: %w", err)
	}
	srv := &http.Server{Handler: demoBackend(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	base := "http://" + ln.Addr().String()
	// The gRPC demo takes gRPC's customary port when it is free, so
	// examples/apis/demo.grpc.yaml works as it is; else any port.
	gln, err := net.Listen("tcp", "127.0.0.1:50051")
	if err != nil {
		gln, err = net.Listen("tcp", "127.0.0.1:0")
	}
	if err != nil {
		_ = srv.Close()
		return nil, fmt.Errorf("demo grpc backend: %w", err)
	}
	gsrv := grpcdemo.Start(gln, "jetway-demo")
	svc, err := demoService(nc)
	if err != nil {
		_ = srv.Close()
		gsrv.Stop()
		return nil, fmt.Errorf("demo nats service: %w", err)
	}
	stop = func() { _ = srv.Close(); gsrv.Stop(); _ = svc.Stop() }

	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := w.WaitLive(wctx); err != nil {
		stop()
		return nil, fmt.Errorf("demo: %w", err)
	}
	c, err := registry.NewClient(wctx, nc, registry.BucketOptions{})
	if err != nil {
		stop()
		return nil, err
	}
	for _, doc := range demoAPIs(base, gln.Addr().String()) {
		a, err := c.Put(wctx, []byte(doc))
		var rc *registry.RouteConflictError
		if errors.As(err, &rc) {
			// Another API took a demo route while the demo was away: it
			// keeps it, the rest of the demo still starts.
			log.Warn("demo api not published", "api", rc.API, "err", err)
			continue
		}
		if err != nil {
			stop()
			return nil, fmt.Errorf("publishing demo api: %w", err)
		}
		log.Info("demo api published", "api", a.Name, "route", a.Route.Method+" "+a.Route.Path)
	}
	stopNews, err := demoPush(ctx, wctx, nc, c, log, edgeURL)
	if err != nil {
		stop()
		return nil, err
	}
	prev := stop
	stop = func() { stopNews(); prev() }
	log.Info("demo ready: try curl "+edgeURL+"/v1/hello/world", "backend", base, "grpc_backend", gln.Addr().String(), "nats_service", "svc.demo.greet")
	return stop, nil
}

// demoPush stores the demo.news topic and two apps, demo-reader (may
// subscribe) and demo-writer (may publish), with fresh keys at every start
// (they are logged: this is a demo), and publishes a message every 5 s.
func demoPush(ctx, wctx context.Context, nc *nats.Conn, c *registry.Client, log *slog.Logger, edgeURL string) (stop func(), err error) {
	t, err := c.PutTopic(wctx, []byte(`{"name":"demo.news","description":"The demo's topic: a message every 5 s; resume with Last-Event-ID or after=.",
	  "publish":["demo-writer"],"subscribe":["demo-reader","demo-writer"],"retention":{"max_age":"1h"}}`))
	if err != nil {
		return nil, fmt.Errorf("demo topic: %w", err)
	}
	keys := map[string]string{}
	for _, id := range []string{"demo-reader", "demo-writer"} {
		key, rec, err := registry.NewAPIKey()
		if err != nil {
			return nil, err
		}
		if _, err := c.PutApp(wctx, &registry.App{ID: id, Status: registry.AppActive, Keys: []registry.AppKey{rec}, APIs: []string{"demo.*"}}); err != nil {
			return nil, fmt.Errorf("demo app: %w", err)
		}
		keys[id] = key
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	tctx, cancel := context.WithCancel(ctx)
	go func() {
		tick := time.NewTicker(5 * time.Second)
		defer tick.Stop()
		for n := 1; ; n++ {
			select {
			case <-tctx.Done():
				return
			case now := <-tick.C:
				pctx, pcancel := context.WithTimeout(tctx, 2*time.Second)
				_, _ = push.Publish(pctx, js, t, "", push.Message{Data: []byte(fmt.Sprintf(`{"n":%d,"at":%q}`, n, now.UTC().Format(time.RFC3339)))})
				pcancel()
			}
		}
	}()
	log.Info("demo push: curl -N -H 'X-Api-Key: "+keys["demo-reader"]+"' "+edgeURL+"/_jetway/sse/demo.news",
		"topic", t.Name, "reader_key", keys["demo-reader"], "writer_key", keys["demo-writer"])
	// The same messages over a WebSocket, from the CLI (it resumes by
	// itself after a dropped connection).
	log.Info("demo push over WebSocket: jetway push subscribe demo.news --transport ws --from 0 --app-key "+keys["demo-reader"]+" --edge "+edgeURL,
		"topic", t.Name, "reader_key", keys["demo-reader"])
	return cancel, nil
}

// demoAPIs are the demo entries, pointing at the demo HTTP backend at base,
// the demo gRPC server at grpcAddr and the demo NATS service.
func demoAPIs(base, grpcAddr string) []string {
	return []string{
		`{"name":"demo.hello","pool":"demo","description":"Greets by name (http backend, path parameter).",
		  "route":{"method":"GET","path":"/v1/hello/{name}"},
		  "backend":{"type":"http","url":"` + base + `/hello/{name}"},"timeout":"2s","concurrency":64}`,
		`{"name":"demo.echo","pool":"demo","description":"Echoes the request body (POST, 64KiB limit).",
		  "route":{"method":"POST","path":"/v1/echo"},
		  "backend":{"type":"http","url":"` + base + `/echo"},"timeout":"2s","max_body":"64KiB"}`,
		`{"name":"demo.status","pool":"demo","description":"Answers with the given status: backend errors pass through untouched.",
		  "route":{"method":"GET","path":"/v1/status/{code}"},
		  "backend":{"type":"http","url":"` + base + `/status/{code}"},"timeout":"2s"}`,
		`{"name":"demo.slow","pool":"demo-slow","description":"A backend slower than the API's timeout: 504 GATEWAY_TIMEOUT.",
		  "route":{"method":"GET","path":"/v1/slow"},
		  "backend":{"type":"http","url":"` + base + `/slow?ms=2000"},"timeout":"300ms","concurrency":8}`,
		`{"name":"demo.mock","pool":"demo","description":"A fixed response from the entry (mock backend).",
		  "route":{"method":"GET","path":"/v1/mock"},
		  "backend":{"type":"mock","status":200,"json":{"ok":true,"source":"mock"}}}`,
		`{"name":"demo.grpc","pool":"demo","description":"A gRPC method called with JSON (grpc-go's test service, schema by server reflection).",
		  "route":{"method":"POST","path":"/v1/grpc/echo"},
		  "backend":{"type":"grpc","target":"` + grpcAddr + `","method":"grpc.testing.TestService/UnaryCall"},"timeout":"2s"}`,
		`{"name":"demo.grpc-stream","pool":"demo","description":"A server-streaming gRPC method: a JSON array, NDJSON or SSE by Accept.",
		  "route":{"method":"POST","path":"/v1/grpc/stream"},
		  "backend":{"type":"grpc","target":"` + grpcAddr + `","method":"grpc.testing.TestService/StreamingOutputCall"},"timeout":"5s"}`,
		`{"name":"demo.nats","pool":"demo","description":"A NATS micro service on Jetway's NATS (svc.demo.greet).",
		  "route":{"method":"POST","path":"/v1/nats/greet"},
		  "backend":{"type":"nats","subject":"svc.demo.greet"},"timeout":"2s"}`,
		`{"name":"demo.orders","pool":"demo","description":"Orders checked at the edge against a JSON Schema: a bad one gets 400 with every problem.",
		  "route":{"method":"POST","path":"/v1/orders"},
		  "backend":{"type":"http","url":"` + base + `/echo"},"timeout":"2s","max_body":"64KiB",
		  "validate":{"body":{"type":"object","required":["item","quantity"],"additionalProperties":false,
		    "properties":{"item":{"type":"string","pattern":"^[a-z-]{1,32}$"},"quantity":{"type":"integer","minimum":1,"maximum":100}}},
		    "messages":{"/body/quantity":"quantity is a whole number from 1 to 100"}},
		  "cases":[
		    {"name":"a good order passes","request":{"method":"POST","path":"/v1/orders","body":{"item":"tea","quantity":2}},"expect":{"status":200,"body":{"/item":"tea"}}},
		    {"name":"a bad one lists its problems","request":{"method":"POST","path":"/v1/orders","body":{"item":"Tea!","quantity":0}},
		     "expect":{"status":400,"body":{"/code":"INVALID_REQUEST","/problems/0/pointer":"/body/item"}}}]}`,
		`{"name":"demo.cached","pool":"demo","description":"Answers kept by the edges for 10 s, shared between them: X-Cache says hit or miss.",
		  "route":{"method":"GET","path":"/v1/cached/{name}"},
		  "backend":{"type":"http","url":"` + base + `/hello/{name}"},"timeout":"2s","cache":{"ttl":"10s","shared":true}}`,
		`{"name":"demo.report","pool":"demo","description":"A slow report: with Prefer: respond-async, 202 and a job to read later (docs/async.md).",
		  "route":{"method":"POST","path":"/v1/report"},
		  "backend":{"type":"http","url":"` + base + `/report"},"timeout":"5s","async":{"attempts":3,"backoff":"1s"}}`,
	}
}

// demoService is the NATS micro service behind demo.nats: it greets the
// name in the body, and answers an empty body with a 400 service error.
func demoService(nc *nats.Conn) (micro.Service, error) {
	return micro.AddService(nc, micro.Config{
		Name: "demo-greeter", Version: "1.0.0", Description: "Jetway's demo NATS service",
		Endpoint: &micro.EndpointConfig{Subject: "svc.demo.greet", Handler: micro.HandlerFunc(func(r micro.Request) {
			name := strings.TrimSpace(string(r.Data()))
			if name == "" {
				_ = r.Error("400", "send a name in the body", nil)
				return
			}
			_ = r.RespondJSON(map[string]string{"hello": name, "from": "nats micro service"})
		})},
	})
}

// demoBackend is the HTTP service behind the demo APIs.
func demoBackend() http.Handler {
	mux := http.NewServeMux()
	writeJSON := func(w http.ResponseWriter, status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("GET /hello/{name}", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]string{"hello": r.PathValue("name"), "request_id": r.Header.Get("X-Request-Id")})
	})
	mux.HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) {
		if ct := r.Header.Get("Content-Type"); ct != "" {
			w.Header().Set("Content-Type", ct)
		}
		_, _ = io.Copy(w, r.Body)
	})
	mux.HandleFunc("GET /status/{code}", func(w http.ResponseWriter, r *http.Request) {
		code, err := strconv.Atoi(r.PathValue("code"))
		if err != nil || code < 200 || code > 599 {
			code = 400
		}
		writeJSON(w, code, map[string]any{"status": code, "from": "demo backend"})
	})
	mux.HandleFunc("POST /report", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<10))
		select {
		case <-time.After(time.Second): // a report takes a while
			writeJSON(w, 200, map[string]any{"report": string(body), "rows": 42})
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("GET /slow", func(w http.ResponseWriter, r *http.Request) {
		ms, _ := strconv.Atoi(r.URL.Query().Get("ms"))
		select {
		case <-time.After(time.Duration(ms) * time.Millisecond):
			writeJSON(w, 200, map[string]int{"slept_ms": ms})
		case <-r.Context().Done():
		}
	})
	return mux
}
