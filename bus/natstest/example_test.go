package natstest_test

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/bus/natstest"
)

// A test starts a real nats-server with JetStream on a random port and a
// temporary store, connects to it, and polls for a condition instead of
// sleeping; the server and the connection go when the test ends. (An
// example has no *testing.T of its own, so it runs the helpers on a small
// stand-in; a test passes its t.)
func Example() {
	t := newExampleT()
	defer t.cleanup()

	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	sub, _ := nc.SubscribeSync("greet")
	_ = nc.Publish("greet", []byte("hello"))
	var got string
	natstest.CheckFor(t, 2*time.Second, 10*time.Millisecond, func() error {
		m, err := sub.NextMsg(10 * time.Millisecond)
		if err != nil {
			return errors.New("not yet")
		}
		got = string(m.Data)
		return nil
	})
	fmt.Println(got, s.JetStreamEnabled())
	// Output: hello true
}

// exampleT is the part of testing.TB the helpers use.
type exampleT struct {
	testing.TB // nil: any other method panics
	dirs       []string
	cleanups   []func()
}

func newExampleT() *exampleT { return &exampleT{} }

func (t *exampleT) Helper()          {}
func (t *exampleT) Cleanup(f func()) { t.cleanups = append(t.cleanups, f) }
func (t *exampleT) Fatal(args ...any) {
	panic(fmt.Sprint(args...))
}
func (t *exampleT) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (t *exampleT) TempDir() string {
	d, err := os.MkdirTemp("", "natstest-example")
	if err != nil {
		panic(err)
	}
	t.dirs = append(t.dirs, d)
	return d
}
func (t *exampleT) cleanup() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
	for _, d := range t.dirs {
		_ = os.RemoveAll(d)
	}
}
