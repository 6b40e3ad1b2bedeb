package edge_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/edge"
	"github.com/jetway-gw/jetway/internal/jetwaytest"
	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/sign"
)

// Signed requests: the signature, the timestamp window, and nonces that
// cannot be replayed on any edge; a nonce store that cannot be reached
// refuses signed requests.
func TestSignedRequests(t *testing.T) {
	g := newGatewayWith(t, edge.Options{})
	nonceConn, _ := nats.Connect(g.Conn.ConnectedUrl())
	t.Cleanup(nonceConn.Close)
	store := registry.NewNonceStore(nonceConn, registry.BucketOptions{})
	// The gateway's edge was built without a store; build two edges with one.
	url1, w1, _ := g.addEdgeWith(t, edge.Options{Nonces: store})
	url2, w2, _ := g.addEdgeWith(t, edge.Options{Nonces: registry.NewNonceStore(g.Conn, registry.BucketOptions{})})
	ctx := context.Background()
	secret, _ := registry.NewHMACSecret()
	if _, err := g.Client.PutApp(ctx, &registry.App{ID: "shop", Status: registry.AppActive, HMACSecrets: []registry.HMACSecret{secret}, APIs: []string{"signed.*"}}); err != nil {
		t.Fatal(err)
	}
	g.Publish(`{"name":"signed.post","pool":"p","route":{"method":"POST","path":"/signed"},"backend":{"type":"mock","body":"in"},"auth":{"methods":["hmac"]}}`)
	natstest.CheckFor(t, 2*time.Second, 2*time.Millisecond, func() error {
		for _, w := range []*registry.Watcher{w1, w2} { // both edges, or a replay may meet a 404
			if w.Current().APIs["signed.post"] == nil || w.Current().Apps["shop"] == nil {
				return fmt.Errorf("not loaded")
			}
		}
		return nil
	})
	signed := func(base, body string, mod func(*http.Request)) *http.Request {
		r, _ := http.NewRequest("POST", base+"/signed?b=2&a=1", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		if err := sign.Sign(r, []byte(body), "shop", secret.Bytes(), "content-type"); err != nil {
			t.Fatal(err)
		}
		if mod != nil {
			mod(r)
		}
		return r
	}
	send := func(r *http.Request) (int, string) {
		resp, err := jetwaytest.Client.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// Valid, then replayed on the same edge and on another edge.
	r := signed(url1, `{"n":1}`, nil)
	auth := r.Header.Get("Authorization")
	if st, b := send(r); st != 200 || b != "in" {
		t.Fatalf("signed request: %d %s", st, b)
	}
	// The scheme name in any case, with several spaces after it (RFC 7235).
	if st, b := send(signed(url1, `{"n":1}`, func(r *http.Request) {
		r.Header.Set("Authorization", "jw1-hmac-sha256   "+strings.TrimPrefix(r.Header.Get("Authorization"), sign.Scheme+" "))
	})); st != 200 || b != "in" {
		t.Errorf("signed, scheme in lower case: %d %s", st, b)
	}
	for i, base := range []string{url1, url2} {
		rr, _ := http.NewRequest("POST", base+"/signed?b=2&a=1", strings.NewReader(`{"n":1}`))
		rr.Header.Set("Content-Type", "application/json")
		rr.Header.Set("Authorization", auth)
		if st, b := send(rr); st != 401 || !strings.Contains(b, "replay") {
			t.Errorf("replay %d: %d %s", i, st, b)
		}
	}
	for name, mod := range map[string]func(*http.Request){
		"tampered body":          func(r *http.Request) { r.Body = io.NopCloser(strings.NewReader(`{"n":2}`)); r.ContentLength = 7 },
		"tampered query":         func(r *http.Request) { r.URL.RawQuery = "a=1&b=3" },
		"tampered signed header": func(r *http.Request) { r.Header.Set("Content-Type", "text/plain") },
		"wrong secret": func(r *http.Request) {
			sign.Sign(r, []byte(`{"n":3}`), "shop", []byte("0123456789abcdef0123456789abcdef"))
		},
		"old timestamp": func(r *http.Request) {
			p, _ := sign.Parse(r.Header.Get("Authorization"))
			ts := fmt.Sprint(time.Now().Add(-10 * time.Minute).Unix())
			s := sign.StringToSign("POST", "/signed", "b=2&a=1", ts, p.Nonce, []byte(`{"n":3}`), p.Headers, r.Header)
			r.Header.Set("Authorization", fmt.Sprintf("%s app=shop,ts=%s,nonce=%s,headers=content-type,sig=%s", sign.Scheme, ts, p.Nonce, sign.MAC(secret.Bytes(), s)))
		},
		"unknown app": func(r *http.Request) {
			r.Header.Set("Authorization", strings.Replace(r.Header.Get("Authorization"), "app=shop", "app=ghost", 1))
		},
		"garbled header": func(r *http.Request) { r.Header.Set("Authorization", sign.Scheme+" app=shop,sig") },
	} {
		if st, b := send(signed(url1, `{"n":3}`, mod)); st != 401 {
			t.Errorf("%s: %d %s", name, st, b)
		}
	}
	// The path signed is the path as sent; the edge routes its canonical
	// form, so another spelling of the same path needs its own signature.
	rs, _ := http.NewRequest("POST", url1+"/sign%65d?b=2&a=1", strings.NewReader(`{"n":5}`))
	if err := sign.Sign(rs, []byte(`{"n":5}`), "shop", secret.Bytes()); err != nil {
		t.Fatal(err)
	}
	if st, b := send(rs); st != 200 || b != "in" {
		t.Errorf("signed, path not canonical: %d %s", st, b)
	}
	rs = signed(url1, `{"n":6}`, func(r *http.Request) { r.URL.RawPath, r.URL.Path = "/sign%65d", "/signed" })
	if st, b := send(rs); st != 401 {
		t.Errorf("signed /signed, sent /sign%%65d: %d %s", st, b)
	}
	// The nonce store goes away: signed requests are refused (503), never let through.
	nonceConn.Close()
	if st, b := send(signed(url1, `{"n":4}`, nil)); st != 503 || !strings.Contains(b, "nonce store") {
		t.Errorf("nonce store down: %d %s", st, b)
	}
}

// The nonce bucket deleted with the bus up: signed calls are refused (503,
// never let through) until the store has re-created it, then pass again,
// without a restart; replays stay refused — also of a request signed
// before the deletion, whose nonce the new bucket never saw (401: sign
// again).
func TestSignedRequestsNonceBucketDeleted(t *testing.T) {
	g := newGatewayWith(t, edge.Options{})
	url, w, _ := g.addEdgeWith(t, edge.Options{Nonces: registry.NewNonceStore(g.Conn, registry.BucketOptions{})})
	// Another edge, which sees no signed request before the replay.
	otherConn, err := nats.Connect(g.Conn.ConnectedUrl())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(otherConn.Close)
	other, w2, _ := g.addEdgeWith(t, edge.Options{Nonces: registry.NewNonceStore(otherConn, registry.BucketOptions{})})
	ctx := context.Background()
	secret, _ := registry.NewHMACSecret()
	if _, err := g.Client.PutApp(ctx, &registry.App{ID: "shop", Status: registry.AppActive, HMACSecrets: []registry.HMACSecret{secret}, APIs: []string{"signed.*"}}); err != nil {
		t.Fatal(err)
	}
	g.Publish(`{"name":"signed.post","pool":"p","route":{"method":"POST","path":"/signed"},"backend":{"type":"mock","body":"in"},"auth":{"methods":["hmac"]}}`)
	natstest.CheckFor(t, 2*time.Second, 2*time.Millisecond, func() error {
		for _, w := range []*registry.Watcher{w, w2} {
			if w.Current().APIs["signed.post"] == nil || w.Current().Apps["shop"] == nil {
				return fmt.Errorf("not loaded")
			}
		}
		return nil
	})
	callOn := func(url, auth string) (int, string, string) {
		r, _ := http.NewRequest("POST", url+"/signed", strings.NewReader(`{}`))
		if auth == "" {
			sign.Sign(r, []byte(`{}`), "shop", secret.Bytes())
		} else {
			r.Header.Set("Authorization", auth)
		}
		resp, err := jetwaytest.Client.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), r.Header.Get("Authorization")
	}
	call := func(auth string) (int, string, string) { return callOn(url, auth) }
	st, b, before := call("")
	if st != 200 {
		t.Fatalf("before: %d %s", st, b)
	}
	js, _ := jetstream.New(g.Conn)
	if err := js.DeleteKeyValue(ctx, registry.BucketNonces); err != nil {
		t.Fatal(err)
	}
	var auth string
	natstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		st, b, a := call("")
		// Signed in the second the bucket came back: refused, sign again.
		if st != 200 && (st != 503 || !strings.Contains(b, "nonce store")) && (st != 401 || !strings.Contains(b, "sign again")) {
			t.Fatalf("bucket gone: %d %s (want 503 until it is back)", st, b)
		}
		if st != 200 {
			return fmt.Errorf("%d %s", st, b)
		}
		auth = a
		return nil
	})
	if st, b, _ := call(auth); st != 401 || !strings.Contains(b, "replay") {
		t.Errorf("replay after re-creation: %d %s", st, b)
	}
	for i, u := range []string{url, other} {
		if st, b, _ := callOn(u, before); st != 401 || !strings.Contains(b, "signed before the replay record was lost") {
			t.Errorf("replay across the deletion on edge %d: %d %s", i, st, b)
		}
	}
}
