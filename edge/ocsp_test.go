package edge_test

import (
	"context"
	"crypto"
	"crypto/tls"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/ocsp"

	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/edge"
	"github.com/jetway-gw/jetway/internal/jetwaytest"
)

// A certificate that names an OCSP responder is served with the
// responder's Good answer stapled; when the responder says Revoked the
// staple goes at once (and the log says why); a responder that fails
// keeps the last good answer while it is current, not after. Answers here
// last two seconds, so the edge asks again every second.
func TestOCSPStapling(t *testing.T) {
	ca := jetwaytest.NewCA(t)
	var status atomic.Int64 // ocsp.Good, ocsp.Revoked, or -1: answer 500
	status.Store(ocsp.Good)
	var asked atomic.Int64
	responder := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		body, _ := io.ReadAll(r.Body)
		req, err := ocsp.ParseRequest(body)
		st := status.Load()
		if err != nil || st < 0 {
			http.Error(w, "no", http.StatusInternalServerError)
			return
		}
		now := time.Now()
		tmpl := ocsp.Response{Status: int(st), SerialNumber: req.SerialNumber, ThisUpdate: now.Add(-time.Minute), NextUpdate: now.Add(2 * time.Second)}
		if st == ocsp.Revoked {
			tmpl.RevokedAt, tmpl.RevocationReason = now.Add(-time.Minute), ocsp.KeyCompromise
		}
		der, err := ocsp.CreateResponse(ca.Certificate(), ca.Certificate(), tmpl, crypto.Signer(ca.Signer()))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_, _ = w.Write(der)
	}))
	defer responder.Close()
	ca.OCSP = responder.URL
	now := time.Now()
	f := ca.Issue(t, t.TempDir(), 110, now.Add(-time.Minute), now.Add(time.Hour), "api.example.test")
	certs, err := edge.LoadCerts([]edge.CertFile{f}, nil)
	if err != nil {
		t.Fatal(err)
	}
	g := jetwaytest.Start(t)
	addr := tlsEdge(t, g, certs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go certs.Staple(ctx, 20*time.Millisecond, nil)

	stapled := func() (int, error) {
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool, ServerName: "api.example.test"})
		if err != nil {
			return 0, err
		}
		defer conn.Close()
		raw := conn.ConnectionState().OCSPResponse
		if raw == nil {
			return -1, nil
		}
		r, err := ocsp.ParseResponse(raw, ca.Certificate())
		if err != nil {
			return 0, err
		}
		if r.SerialNumber.Cmp(big.NewInt(110)) != 0 {
			return 0, fmt.Errorf("stapled the answer for serial %v", r.SerialNumber)
		}
		return r.Status, nil
	}
	want := func(st int, within time.Duration) {
		t.Helper()
		natstest.CheckFor(t, within, 10*time.Millisecond, func() error {
			if got, err := stapled(); err != nil || got != st {
				return fmt.Errorf("staple %d %v, want %d", got, err, st)
			}
			return nil
		})
	}
	want(ocsp.Good, 4*time.Second)
	status.Store(ocsp.Revoked)
	want(-1, 4*time.Second)
	status.Store(ocsp.Good)
	want(ocsp.Good, 4*time.Second)
	status.Store(-1) // the responder fails from now on
	n := asked.Load()
	natstest.CheckFor(t, 2*time.Second, 5*time.Millisecond, func() error {
		if asked.Load() == n {
			return fmt.Errorf("not asked again yet")
		}
		return nil
	})
	if st, err := stapled(); err != nil || st != ocsp.Good {
		t.Fatalf("a failing responder dropped the current staple at once: %d %v", st, err)
	}
	want(-1, 4*time.Second) // once it has expired
}
