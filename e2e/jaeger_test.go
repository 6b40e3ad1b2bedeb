package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/bus/natstest"
)

// TestTracesInJaeger sends calls through `jetway serve` with OTLP export
// to a real Jaeger (all-in-one, in-memory) and finds, through Jaeger's
// query API, one trace that holds the edge's, the worker's and the
// backend call's spans. .ci/run builds Jaeger from the tools module and
// sets JETWAY_JAEGER; without it the test is skipped (task jaeger builds
// and runs it by hand).
func TestTracesInJaeger(t *testing.T) {
	bin := os.Getenv("JETWAY_JAEGER")
	if bin == "" {
		t.Skip("JETWAY_JAEGER is not set (.ci/run builds Jaeger and sets it)")
	}
	ctx, cancel := context.WithCancel(context.Background())
	jaeger := exec.CommandContext(ctx, bin)
	logs, _ := os.CreateTemp(t.TempDir(), "jaeger-*.log")
	jaeger.Stdout, jaeger.Stderr = logs, logs
	if err := jaeger.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = jaeger.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logs.Name())
			t.Logf("jaeger log:\n%s", b)
		}
	})
	natstest.CheckFor(t, 60*time.Second, 100*time.Millisecond, func() error {
		resp, err := http.Get("http://127.0.0.1:16686/api/services")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	})

	be := newBackend(t, func(b *backend, w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "traced "+r.Header.Get("Traceparent"))
	})
	// Not parallel: the environment reaches only this test's processes.
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
	t.Setenv("OTEL_SERVICE_NAME", "jetway-e2e")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "200")
	srv := startNode(t, "serve", "serve", "")
	srv.waitReady(t)
	putAPI(t, srv.natsURL, entry("traced.api", "traced", "GET", "/v1/traced", httpBackend(be.URL+"/t"), nil))
	waitStatus(t, srv.edge+"/v1/traced", http.StatusOK)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	r, err := do(http.MethodGet, srv.edge+"/v1/traced", nil, http.Header{"Traceparent": {"00-" + traceID + "-00f067aa0ba902b7-01"}})
	if err != nil || r.status != 200 || !strings.Contains(string(r.body), traceID) {
		t.Fatalf("traced call: %v %v (the backend must get the trace)", r, err)
	}

	// Jaeger has the whole trace: edge server span, NATS send, worker
	// process, backend call.
	want := []string{"GET /v1/traced", "send jetway.api.traced.traced.api", "process jetway.api.traced.traced.api", "GET"}
	natstest.CheckFor(t, 30*time.Second, 250*time.Millisecond, func() error {
		resp, err := http.Get("http://127.0.0.1:16686/api/traces/" + traceID)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var body struct {
			Data []struct {
				Spans []struct {
					SpanID        string `json:"spanID"`
					OperationName string `json:"operationName"`
					References    []struct {
						RefType string `json:"refType"`
						SpanID  string `json:"spanID"`
					} `json:"references"`
					Tags []struct {
						Key   string `json:"key"`
						Value any    `json:"value"`
					} `json:"tags"`
				} `json:"spans"`
			} `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || len(body.Data) == 0 {
			return fmt.Errorf("trace not in jaeger yet (%v)", err)
		}
		have := map[string]bool{}
		byName := map[string]string{} // operation -> span id
		parent := map[string]string{} // span id -> parent span id
		tags := map[string]map[string]string{}
		for _, s := range body.Data[0].Spans {
			have[s.OperationName] = true
			byName[s.OperationName] = s.SpanID
			for _, r := range s.References {
				if r.RefType == "CHILD_OF" {
					parent[s.SpanID] = r.SpanID
				}
			}
			tags[s.OperationName] = map[string]string{}
			for _, tg := range s.Tags {
				tags[s.OperationName][tg.Key] = fmt.Sprint(tg.Value)
			}
		}
		for _, w := range want {
			if !have[w] {
				return fmt.Errorf("trace lacks span %q (has %v)", w, have)
			}
		}
		// One chain: caller -> edge -> NATS send -> worker -> backend call.
		up := "00f067aa0ba902b7"
		for _, w := range want {
			if got := parent[byName[w]]; got != up {
				t.Fatalf("span %q has parent %q, want %q", w, got, up)
			}
			up = byName[w]
		}
		if tg := tags["GET /v1/traced"]; tg["jetway.api"] != "traced.api" || tg["http.response.status_code"] != "200" {
			t.Fatalf("edge span tags %v", tg)
		}
		if tg := tags["process jetway.api.traced.traced.api"]; tg["messaging.system"] != "nats" || tg["http.response.status_code"] != "200" {
			t.Fatalf("worker span tags %v", tg)
		}
		return nil
	})
}
