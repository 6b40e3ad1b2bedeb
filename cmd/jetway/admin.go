package main

import (
	"encoding/json"
	"net/http"
	"net/http/pprof"
)

// adminHandler serves the admin listener: /healthz answers while the
// process runs; /readyz answers 200 only when connected to NATS with the
// registry loaded and not draining, and 503 with the reason otherwise.
func (n *node) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		ready, reason := n.watcher.Ready()
		if n.draining.Load() {
			ready, reason = false, "draining: shutting down"
		}
		s := n.watcher.Current()
		body := map[string]any{
			"ready":    ready,
			"reason":   reason,
			"role":     n.role,
			"registry": map[string]any{"source": s.Source.String(), "revision": s.Revision, "apis": len(s.APIs)},
		}
		if n.edge != nil {
			body["routes"] = n.edge.Routes()
			body["edges"] = n.edge.Edges()
		}
		if n.worker != nil {
			body["serving"] = n.worker.Subscribed()
			body["in_flight"] = n.worker.InFlight()
		}
		w.Header().Set("Content-Type", "application/json")
		if !ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(body)
	})
	if n.f.pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}
