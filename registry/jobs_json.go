package registry

import (
	"encoding/base64"
	"slices"
	"strconv"
	"time"

	"github.com/jetway-gw/jetway/bus"
)

// A job's status is written two or three times a job (pending, running,
// the end), and encoding/json's reflection over it (and time.Time's
// MarshalJSON) was a twentieth of a job's CPU in `serve`. appendJobStatus
// writes the same bytes by hand: TestJobStatusJSONIsEncodingJSONs and
// its fuzz target hold it to json.Marshal's output, field for field.
// Reading a status stays with encoding/json.

// appendJobStatus appends st as json.Marshal(st) would; ok is false for
// what only json.Marshal says (a time it refuses).
func appendJobStatus(b []byte, st *JobStatus) (_ []byte, ok bool) {
	if !jsonTime(st.Submitted) || !jsonTime(st.Updated) || st.NextAttempt != nil && !jsonTime(*st.NextAttempt) {
		return b, false
	}
	b = append(b, `{"id":`...)
	b = appendJSONString(b, st.ID)
	b = append(b, `,"api":`...)
	b = appendJSONString(b, st.API)
	b = append(b, `,"tier":`...)
	b = appendJSONString(b, st.Tier)
	b = append(b, `,"pool":`...)
	b = appendJSONString(b, st.Pool)
	b = appendOptString(b, `,"app":`, st.App)
	b = appendOptString(b, `,"user":`, st.User)
	b = appendOptString(b, `,"request_id":`, st.RequestID)
	b = append(b, `,"state":`...)
	b = appendJSONString(b, st.State)
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(st.Attempts), 10)
	b = append(b, `,"max_attempts":`...)
	b = strconv.AppendInt(b, int64(st.MaxAttempts), 10)
	b = append(b, `,"submitted":`...)
	b = appendJSONTime(b, st.Submitted)
	b = append(b, `,"updated":`...)
	b = appendJSONTime(b, st.Updated)
	if st.NextAttempt != nil {
		b = append(b, `,"next_attempt":`...)
		b = appendJSONTime(b, *st.NextAttempt)
	}
	b = appendOptString(b, `,"reason":`, st.Reason)
	if e := st.LastError; e != nil {
		b = append(b, `,"last_error":{`...)
		if e.Code != "" {
			b = append(b, `"code":`...)
			b = appendJSONString(b, e.Code)
			b = append(b, ',')
		}
		b = append(b, `"status":`...)
		b = strconv.AppendInt(b, int64(e.Status), 10)
		b = appendOptString(b, `,"message":`, e.Message)
		b = append(b, '}')
	}
	if r := st.Result; r != nil {
		b = append(b, `,"result":{"status":`...)
		b = strconv.AppendInt(b, int64(r.Status), 10)
		if len(r.Headers) > 0 {
			b = append(b, `,"headers":{`...)
			keys := make([]string, 0, len(r.Headers))
			for k := range r.Headers {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for i, k := range keys {
				if i > 0 {
					b = append(b, ',')
				}
				b = appendJSONString(b, k)
				b = append(b, ':')
				b = appendJSONStrings(b, r.Headers[k])
			}
			b = append(b, '}')
		}
		if r.Body != nil {
			b = append(b, `,"body":`...)
			b = appendJSONString(b, *r.Body)
		}
		if len(r.BodyBase64) > 0 {
			b = append(b, `,"body_base64":"`...)
			b = base64.StdEncoding.AppendEncode(b, r.BodyBase64)
			b = append(b, '"')
		}
		b = append(b, `,"size":`...)
		b = strconv.AppendInt(b, int64(r.Size), 10)
		if r.Omitted {
			b = append(b, `,"omitted":true`...)
		}
		b = appendOptString(b, `,"stored":`, r.Stored)
		b = append(b, '}')
	}
	if len(st.Callbacks) > 0 {
		b = append(b, `,"callbacks":[`...)
		for i, c := range st.Callbacks {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"to":`...)
			b = appendJSONString(b, c.To)
			b = append(b, `,"state":`...)
			b = appendJSONString(b, c.State)
			b = append(b, `,"attempts":`...)
			b = strconv.AppendInt(b, int64(c.Attempts), 10)
			b = appendOptString(b, `,"last_error":`, c.LastError)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	return append(b, '}'), true
}

// jsonTime reports whether t is a time time.Time.MarshalJSON writes: a
// year of four digits, a zone within ±24 h.
func jsonTime(t time.Time) bool {
	y := t.Year()
	_, off := t.Zone()
	return y >= 0 && y <= 9999 && off > -24*3600 && off < 24*3600
}

func appendJSONTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

// appendOptString appends name and s unless s is empty (omitempty).
func appendOptString(b []byte, name, s string) []byte {
	if s == "" {
		return b
	}
	return appendJSONString(append(b, name...), s)
}

func appendJSONStrings(b []byte, ss []string) []byte {
	if ss == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, s)
	}
	return append(b, ']')
}

// appendJSONString is s quoted as json.Marshal quotes it.
func appendJSONString(b []byte, s string) []byte { return bus.AppendJSONString(b, s, true) }
