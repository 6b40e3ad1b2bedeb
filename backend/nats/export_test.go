package natsbackend

import (
	"testing"
	"time"
)

// SetRecheck shortens how often a remote connection's secret is read
// again, for the test.
func SetRecheck(t *testing.T, d time.Duration) {
	old := recheckEvery
	recheckEvery = d
	t.Cleanup(func() { recheckEvery = old })
}
