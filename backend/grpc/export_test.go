package grpcbackend

import (
	"testing"
	"time"
)

// SetRefreshMin shortens the least time between two schema reads for one
// test (set before the test's gateway starts).
func SetRefreshMin(t *testing.T, d time.Duration) {
	old := refreshMin
	refreshMin = d
	t.Cleanup(func() { refreshMin = old })
}
