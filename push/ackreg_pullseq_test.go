package push_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/push/pushclient"
)

// pulling with after=<answer's cursor> in small pages, with
// messages for other devices interleaved, large ones (the byte bound)
// and live publishes during long polls, yields every message for d1
// exactly once, in order.
func TestAckRegressPullPagesLoseNothing(t *testing.T) {
	g, pub, shop := start(t)
	ctx := context.Background()
	var want []string
	big := strings.Repeat("b", 100<<10)
	for i := 0; i < 60; i++ {
		switch i % 3 {
		case 0:
			d := fmt.Sprintf("m%d", i)
			if i%9 == 0 {
				d += big
			}
			publish(t, g, pub, "?to=device&app=shop&device=d1", d)
			want = append(want, d)
		case 1:
			publish(t, g, pub, "?to=device&app=shop&device=d2", "other")
		case 2:
			d := fmt.Sprintf("all%d", i)
			publish(t, g, pub, "", d)
			want = append(want, d)
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // live ones meanwhile
		defer wg.Done()
		for i := 0; i < 40; i++ {
			time.Sleep(15 * time.Millisecond)
			if i%2 == 0 {
				publish(t, g, pub, "?to=device&app=shop&device=d2", "other")
				continue
			}
			d := fmt.Sprintf("live%d", i)
			if i%5 == 0 {
				d += big
			}
			mu.Lock()
			want = append(want, d)
			mu.Unlock()
			publish(t, g, pub, "?to=device&app=shop&device=d1", d)
		}
	}()
	o := pushclient.Options{Edge: g.URL, Topic: "orders", Header: http.Header{"X-Api-Key": {shop}}, Device: "d1", From: "0"}
	var got []string
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		p, err := pushclient.Pull(ctx, o, 3, 200*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range p.Messages {
			got = append(got, m.Data)
		}
		if len(p.Gaps) > 0 {
			t.Fatalf("gaps %+v", p.Gaps)
		}
		o.From, o.After = "", p.Cursor
		mu.Lock()
		n := len(want)
		mu.Unlock()
		if len(got) >= n && n == 60/3*2+20 {
			break
		}
	}
	wg.Wait()
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("got %d messages, want %d\n got %.300q\nwant %.300q", len(got), len(want), strings.Join(got, ","), strings.Join(want, ","))
	}
}
