package resilience

import (
	"net/http"
	"testing"
	"time"
)

func TestLastGood(t *testing.T) {
	c := NewLastGood(2, time.Minute)
	t0 := time.Unix(1000, 0)
	h := http.Header{"X": {"1"}}
	body := []byte("a")
	c.Put("a", t0, 200, h, body)
	body[0], h["X"][0] = 'z', "changed" // the cache holds copies
	if got := c.Get("a", t0); got == nil || string(got.Body) != "a" || got.Header.Get("X") != "1" {
		t.Fatalf("got %+v", got)
	}
	c.Put("b", t0, 200, nil, []byte("b"))
	c.Get("a", t0) // a is now the most recent
	c.Put("c", t0, 200, nil, []byte("c"))
	if c.Get("b", t0) != nil || c.Get("a", t0) == nil || c.Len() != 2 {
		t.Fatal("least recently used entry not evicted")
	}
	if c.Get("a", t0.Add(2*time.Minute)) != nil || c.Len() != 1 {
		t.Fatal("expired entry served")
	}
}
