package e2e

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAdminRole: jetway admin serves the admin REST API and the console
// beside a cluster, as the admin NATS user, with no edge or worker of its
// own; an edge's admin listener serves neither.
func TestAdminRole(t *testing.T) {
	t.Parallel()
	srv := startNode(t, "serve", "serve", "", "--demo")
	srv.waitLog(t, startTimeout, `"demo ready"`, func(l logLine) bool { return strings.HasPrefix(l.str("msg"), "demo ready") })
	adm := startNode(t, "admin", "admin", "", "--nats", srv.natsURL, "--edge", srv.edge)
	adm.waitReady(t)
	tok, err := os.ReadFile(filepath.Join(adm.data, "admin-token"))
	if err != nil {
		t.Fatal(err)
	}
	auth := http.Header{"Authorization": {"Bearer " + strings.TrimSpace(string(tok))}}

	r, err := do(http.MethodGet, adm.admin+"/v1/apis", nil, auth)
	if err != nil || r.status != http.StatusOK || !strings.Contains(string(r.body), "demo.hello") {
		t.Fatalf("GET /v1/apis on jetway admin: %v %v", r, err)
	}
	if r, _ := do(http.MethodGet, adm.admin+"/v1/apis", nil, nil); r.status != http.StatusUnauthorized {
		t.Fatalf("without a token: %v", r)
	}
	if r, _ := do(http.MethodGet, adm.admin+"/console/", nil, nil); r.status != http.StatusOK || !strings.Contains(string(r.body), "app.js") {
		t.Fatalf("the console: %v", r)
	}
	// A write through it is live on the cluster's edge.
	r, err = do(http.MethodPut, adm.admin+"/v1/apis/demo.hello/degrade", strings.NewReader(`{"on":true}`),
		http.Header{"Authorization": auth["Authorization"], "If-None-Match": {"*"}})
	if err != nil || r.status/100 != 2 {
		t.Fatalf("degrade through jetway admin: %v %v", r, err)
	}
	waitStatus(t, srv.edge+"/v1/hello/x", http.StatusServiceUnavailable)
	// Its saved cases run through the --edge it was given.
	r, err = do(http.MethodPost, adm.admin+"/v1/apis/demo.orders/test", nil, auth)
	if err != nil || r.status != http.StatusOK || !strings.Contains(string(r.body), `"failed":0`) {
		t.Fatalf("cases through jetway admin: %v %v", r, err)
	}
	// The trail names it.
	if res := jetway(t, "", "audit", "--kind", "degrade", "--nats", srv.natsURL); !strings.Contains(res.stdout, "bootstrap-token") {
		t.Errorf("audit:\n%s", res.stdout)
	}

	edge := startNode(t, "edge", "edge", "", "--nats", srv.natsURL)
	for _, p := range []string{"/v1/apis", "/console/"} {
		if r, _ := do(http.MethodGet, edge.admin+p, nil, auth); r.status != http.StatusNotFound {
			t.Errorf("an edge's admin listener serves %s: %v", p, r)
		}
	}
}
