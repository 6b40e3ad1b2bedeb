package admin

import "time"

// SetLiveTimes shortens the live feed's keep-alive and write timeout for a
// test; the returned func restores them.
func SetLiveTimes(keepAlive, write time.Duration) func() {
	k, w := liveKeepAlive, liveWriteTimeout
	liveKeepAlive, liveWriteTimeout = keepAlive, write
	return func() { liveKeepAlive, liveWriteTimeout = k, w }
}
