package admin

import (
	"context"
	"net/http/httptest"
	"time"

	"github.com/jetway-gw/jetway/registry"
)

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

// SetMaxReportBytes lowers the SLA records a report over REST may read,
// for a test; the returned func restores it.
func SetMaxReportBytes(n int64) func() {
	old := maxReportBytes
	maxReportBytes = n
	return func() { maxReportBytes = old }
}

// ReportSlot takes the slots of a report as a principal of role would,
// for a test.
func (s *Server) ReportSlot(actor string, role registry.Role) (release func(), ok bool) {
	r := httptest.NewRequest("GET", "/v1/reports", nil)
	r = r.WithContext(context.WithValue(r.Context(), principalKey{}, principal{actor: actor, role: role}))
	return s.reportSlot(r)
}
