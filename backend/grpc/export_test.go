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

// SetRefreshEvery shortens the age at which a schema is read again
// whatever the calls say, for one test (set before the test's gateway
// starts).
func SetRefreshEvery(t *testing.T, d time.Duration) {
	old := refreshEvery
	refreshEvery = d
	t.Cleanup(func() { refreshEvery = old })
}
