package edge

import (
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/registry"
)

// faultSwitch is an API tier's fault injection drill, compiled once per
// registry change.
type faultSwitch struct {
	expires  time.Time
	apps     map[string]bool // nil: every caller
	headers  [][2]string     // canonical name, exact value; all must match
	delayMin time.Duration
	delayMax time.Duration
	delayPer int // delayed calls per 10 000 matching ones
	abortPer int // aborted calls per 10 000 matching ones

	status  int
	header  http.Header
	body    []byte // nil: the refusal is the answer
	refusal *Error
}

// The X-Jetway-Fault values a drilled call's caller sees.
var faultDelayed, faultAborted, faultBoth = []string{"delay"}, []string{"abort"}, []string{"delay,abort"}

// compileFault returns a tier's drill: f applies to the sandbox tier when
// it says so, else to production; nil when it does not apply here.
func compileFault(f *registry.Fault, sandboxTier bool) *faultSwitch {
	if f == nil || f.Sandbox != sandboxTier || f.Expired(time.Now()) {
		return nil
	}
	fs := &faultSwitch{expires: f.ExpiresAt}
	if len(f.Apps) > 0 {
		fs.apps = make(map[string]bool, len(f.Apps))
		for _, a := range f.Apps {
			fs.apps[a] = true
		}
	}
	for k, v := range f.Headers {
		fs.headers = append(fs.headers, [2]string{http.CanonicalHeaderKey(k), v})
	}
	if d := f.Delay; d != nil {
		fs.delayMin, fs.delayMax, fs.delayPer = time.Duration(d.Min), max(time.Duration(d.Max), time.Duration(d.Min)), perTenThousand(d.Percent)
	}
	if a := f.Abort; a != nil {
		fs.abortPer = perTenThousand(a.Percent)
		fs.status, fs.header, fs.body = a.Response()
		fs.refusal = &Error{Code: bus.CodeFaultInjected, Status: fs.status, Message: f.Message(), Header: fs.header}
	}
	return fs
}

func perTenThousand(percent float64) int { return int(percent*100 + 0.5) }

// matches reports whether the drill covers a call.
func (f *faultSwitch) matches(c *call) bool {
	if f.apps != nil && (c.app == nil || !f.apps[c.app.app.ID]) {
		return false
	}
	for _, h := range f.headers {
		vs := c.r.Header[h[0]]
		if len(vs) != 1 || vs[0] != h[1] {
			return false
		}
	}
	return true
}

// injectFault lets the API's drill delay and/or abort the call: a delay
// first (within the deadline), then an abort, each for its share of the
// matching calls. Either shows in the call's metrics, trace, access log
// and X-Jetway-Fault header.
func (c *call) injectFault() error {
	f := c.rt.fault
	if f == nil {
		return nil
	}
	now := time.Now()
	if !now.Before(f.expires) || !f.matches(c) {
		return nil
	}
	m := c.e.o.Metrics
	if f.delayPer > 0 && rand.IntN(10000) < f.delayPer {
		c.fault = "delay"
		c.Header()["X-Jetway-Fault"] = faultDelayed
		if m != nil {
			m.RecordFault(c.rt.key, c.rt.api.Pool, false)
		}
		d := f.delayMin
		if span := f.delayMax - f.delayMin; span > 0 {
			d += rand.N(span + 1)
		}
		late := now.Add(d).After(c.deadline)
		if late {
			d = c.deadline.Sub(now)
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-c.r.Context().Done():
			t.Stop()
			return errCallerGone
		}
		if late {
			return c.refuse(bus.CodeGatewayTimeout, "api "+c.rt.api.Name+" did not answer within its deadline (a drill delayed the call)")
		}
	}
	if f.abortPer > 0 && rand.IntN(10000) < f.abortPer {
		if c.fault == "delay" {
			c.fault = "delay,abort"
			c.Header()["X-Jetway-Fault"] = faultBoth
		} else {
			c.fault = "abort"
			c.Header()["X-Jetway-Fault"] = faultAborted
		}
		if m != nil {
			m.RecordFault(c.rt.key, c.rt.api.Pool, true)
		}
		if f.body == nil {
			return f.refusal
		}
		return c.answer(bus.CodeFaultInjected, f.status, f.header, f.body)
	}
	return nil
}
