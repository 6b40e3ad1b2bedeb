package admin

import "time"

// SetLiveTimes shortens the live feed's keep-alive and write timeout for a
// test; the returned func restores them.
func SetLiveTimes(keepAlive, write time.Duration) func() {
	k, w := liveKeepAlive, liveWriteTimeout
	liveKeepAlive, liveWriteTimeout = keepAlive, write
	return func() { liveKeepAlive, liveWriteTimeout = k, w }
}

// SetRequestTimeout shortens the bound of a request's registry work for a
// test; the returned func restores it.
func SetRequestTimeout(d time.Duration) func() {
	old := requestTimeout
	requestTimeout = d
	return func() { requestTimeout = old }
}
