package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/bench/internal/benchsrv"
	"github.com/jetway-gw/jetway/resilience"
)

// Channel sets (issue 13): what a set of three channels costs over one
// backend, and how fast a failing provider loses its traffic.
//
//	go test -run '^$' -bench 'Jetway$|JetwayChannels' -benchtime=2s -count=5 ./bench/
//	go test -run '^$' -bench ChannelCutover -benchtime=5x ./bench/

// channelsAPI is helloAPI served by three channels, all to the backend at
// base: the cost of picking a channel and counting its outcome.
func channelsAPI(base string) string {
	ch := func(name string) string {
		return `{"name":"` + name + `","backend":{"type":"http","url":"` + base + `/hello"}}`
	}
	return `{"name":"bench.channels","pool":"bench","route":{"method":"GET","path":"/hello-channels"},
	  "channels":[` + ch("a") + `,` + ch("b") + `,` + ch("c") + `],"timeout":"5s","concurrency":4096}`
}

// BenchmarkJetwayChannels is BenchmarkJetway with a channel set of three
// channels in place of the backend.
func BenchmarkJetwayChannels(b *testing.B) {
	be := backend(b)
	j := startJetway(b, channelsAPI(be.URL))
	runParallel(b, j.url+"/hello-channels")
}

// BenchmarkChannelCutover runs one timeline per iteration: two providers
// under a steady 400 calls/s of GETs, one starts failing every call; it
// reports how long (in windows of 1 s) until the controller cuts it —
// its share 0 — and how many callers saw an error meanwhile (the other
// provider is healthy, so failover should hide every failure).
func BenchmarkChannelCutover(b *testing.B) {
	var windows, errs float64
	for i := range b.N {
		w, e := cutover(b, i)
		windows += w
		errs += float64(e)
	}
	b.ReportMetric(windows/float64(b.N), "windows-to-cut")
	b.ReportMetric(errs/float64(b.N), "caller-errors")
}

func cutover(b *testing.B, i int) (windows float64, callerErrors int64) {
	var failing atomic.Bool
	provider := func(failer bool) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			if failer && failing.Load() {
				w.WriteHeader(http.StatusBadGateway)
				return
			}
			_, _ = w.Write([]byte(`{"sent":true}`))
		}))
		b.Cleanup(s.Close)
		return s
	}
	pa, pb := provider(true), provider(false)
	name := fmt.Sprintf("bench.sms%d", i)
	j := startJetway(b, `{"name":"`+name+`","pool":"bench","route":{"method":"GET","path":"/sms"},"timeout":"2s",
	  "channels":[{"name":"a","backend":{"type":"http","url":"`+pa.URL+`"}},{"name":"b","backend":{"type":"http","url":"`+pb.URL+`"}}],
	  "channel_policy":{"window":"1s","min_volume":20,"base":"1h"}}`)
	c := benchsrv.Client()
	defer c.CloseIdleConnections()
	var errors atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 { // 4 callers × 100/s
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(10 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
				}
				if code, err := get(c, j.url+"/sms"); err != nil || code != 200 {
					errors.Add(1)
				}
			}
		}()
	}
	time.Sleep(2 * time.Second) // the controller is elected, both channels serve
	failing.Store(true)
	start := time.Now()
	for {
		st, _, err := j.client.ChannelState(context.Background(), name)
		if err == nil && st.Channel("a") != nil && st.Channel("a").State == resilience.ChannelCut {
			break
		}
		if time.Since(start) > 20*time.Second {
			b.Fatalf("channel a not cut after 20 s: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	took := time.Since(start)
	close(stop)
	wg.Wait()
	return took.Seconds(), errors.Load()
}
