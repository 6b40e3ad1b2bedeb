package edge

import (
	"net"
	"testing"
	"time"
)

func TestLimitListener(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := LimitListener(inner, 2)
	defer l.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c1, c2 := dial(), dial()
	s1, s2 := <-accepted, <-accepted
	// A third connection is closed by the server at once.
	c3 := dial()
	c3.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := c3.Read(make([]byte, 1)); err == nil {
		t.Fatal("third connection was served")
	}
	// Closing one frees a slot.
	s1.Close()
	c4 := dial()
	select {
	case s4 := <-accepted:
		s4.Close()
	case <-time.After(2 * time.Second):
		t.Fatal("freed slot not reused")
	}
	for _, c := range []net.Conn{c1, c2, c3, c4, s2} {
		c.Close()
	}
}
