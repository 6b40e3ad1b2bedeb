package registry

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/jetway-gw/jetway/schemas"
)

// FaultPrefix starts the jetway_flags key of an API's fault injection
// switch (schemas/fault.schema.json).
const FaultPrefix = "fault."

// FaultKey is the jetway_flags key of an API's fault switch.
func FaultKey(api string) string { return FaultPrefix + api }

// MaxFaultFor is how far ahead a fault switch may expire when written: a
// drill nobody turns off ends by itself.
const MaxFaultFor = 7 * 24 * time.Hour

// Fault is a drill on an API: until ExpiresAt, every edge delays and/or
// aborts a share of the API's matching calls before they reach a worker.
type Fault struct {
	Delay     *FaultDelay       `json:"delay,omitempty"`
	Abort     *FaultAbort       `json:"abort,omitempty"`
	Apps      []string          `json:"apps,omitempty"`
	Headers   map[string]string `json:"headers,omitempty"`
	Sandbox   bool              `json:"sandbox,omitempty"`
	ExpiresAt time.Time         `json:"expires_at"`
	Reason    string            `json:"reason,omitempty"`

	API      string    `json:"-"`
	Revision uint64    `json:"-"`
	Written  time.Time `json:"-"` // when the stored switch was written (zero: unknown)
}

// FaultDelay holds calls for Min, or for a uniform time in [Min, Max].
type FaultDelay struct {
	Min     Duration `json:"min"`
	Max     Duration `json:"max,omitempty"`
	Percent float64  `json:"percent"`
}

// FaultAbort answers calls at once with a status (and body).
type FaultAbort struct {
	Percent float64 `json:"percent"`
	Static
}

// Marshal returns the switch's JSON.
func (f *Fault) Marshal() []byte {
	b, _ := json.Marshal(f)
	return b
}

// Message is the human message of the default FAULT_INJECTED answer.
func (f *Fault) Message() string {
	if f.Reason != "" {
		return "fault injected into api " + f.API + ": " + f.Reason
	}
	return "fault injected into api " + f.API + " (a drill)"
}

// Expired reports whether the switch has turned itself off at now.
func (f *Fault) Expired(now time.Time) bool { return !now.Before(f.ExpiresAt) }

// ParseFault decodes and validates the value of a jetway_flags key of the
// form fault.<api>. written, when not zero, is when the switch is being
// written: it may then expire at most MaxFaultFor later. Stored switches
// are read with a zero written (an expired one is valid, and off).
func ParseFault(key string, doc []byte, written time.Time) (*Fault, error) {
	api, js, l := parseFlag(key, FaultPrefix, doc, schemas.ValidateFault)
	if js == nil {
		return nil, l.err()
	}
	add := l.add
	var f Fault
	if len(l.ps) == 0 {
		if err := strictJSON(js, &f); err != nil {
			var te *time.ParseError
			if errors.As(err, &te) {
				add("expires_at", "must be an RFC 3339 time like 2026-12-01T18:00:00Z (got %q)", te.Value)
			} else {
				add("", "%v", err)
			}
		}
	}
	if len(l.ps) == 0 {
		if d := f.Delay; d != nil {
			if d.Min <= 0 || time.Duration(d.Min) > MaxTimeout {
				add("delay.min", "must be between 1ms and %v", MaxTimeout)
			}
			if d.Max != 0 && (d.Max < d.Min || time.Duration(d.Max) > MaxTimeout) {
				add("delay.max", "must be between delay.min and %v", MaxTimeout)
			}
		}
		if f.Abort != nil {
			f.Abort.Static.check("abort", add)
		}
		for k := range f.Headers {
			if !validHeaderName(k) {
				add("headers."+k, "is not a valid HTTP header name")
			}
		}
		if !written.IsZero() && f.ExpiresAt.After(written.Add(MaxFaultFor)) {
			add("expires_at", "must be at most %v ahead", MaxFaultFor)
		}
		if !written.IsZero() && !f.ExpiresAt.After(written) {
			add("expires_at", "is not in the future: the switch would be off")
		}
	}
	if err := l.err(); err != nil {
		return nil, err
	}
	f.API = api
	return &f, nil
}

// Response is an abort's answer: its status, headers and body (nil body:
// the default {"code":"FAULT_INJECTED",...}).
func (a *FaultAbort) Response() (status int, h http.Header, body []byte) {
	status, h, body = a.Static.Compile(http.StatusServiceUnavailable)
	if !a.HasBody() {
		body = nil
	}
	return status, h, body
}

// Switch is one value of the jetway_flags bucket: a degrade switch or a
// fault switch, by its key's prefix.
type Switch struct {
	Degrade *Degrade
	Fault   *Fault
}

// ParseSwitchAt parses a jetway_flags value by its key, written at
// created (zero: unknown). A fault switch written around SetFault (nats kv
// put) with an expiry further than MaxFaultFor from its writing ends
// MaxFaultFor after it: no drill lasts longer, however it was written.
func ParseSwitchAt(key string, doc []byte, rev uint64, created time.Time) (*Switch, error) {
	if strings.HasPrefix(key, FaultPrefix) {
		f, err := ParseFault(key, doc, time.Time{})
		if err != nil {
			return nil, err
		}
		f.Revision, f.Written = rev, created
		if !created.IsZero() && f.ExpiresAt.After(created.Add(MaxFaultFor)) {
			f.ExpiresAt = created.Add(MaxFaultFor)
		}
		return &Switch{Fault: f}, nil
	}
	d, err := ParseDegrade(key, doc)
	if err != nil {
		return nil, err
	}
	d.Revision = rev
	return &Switch{Degrade: d}, nil
}
