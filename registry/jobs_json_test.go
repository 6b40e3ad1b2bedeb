package registry

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// sameAsEncodingJSON fails t unless appendJobStatus writes st as
// json.Marshal does.
func sameAsEncodingJSON(t *testing.T, st *JobStatus) {
	t.Helper()
	want, err := json.Marshal(st)
	got, ok := appendJobStatus(nil, st)
	if err != nil || !ok {
		if ok {
			t.Fatalf("json.Marshal refused what appendJobStatus wrote: %v\n%s", err, got)
		}
		return // both refuse, or only appendJobStatus: the write falls back to json.Marshal
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("appendJobStatus differs from json.Marshal:\n got %s\nwant %s", got, want)
	}
}

func TestJobStatusJSONIsEncodingJSONs(t *testing.T) {
	at := time.Date(2026, 12, 7, 13, 4, 5, 123456700, time.UTC)
	next := at.Add(1500 * time.Millisecond).In(time.FixedZone("x", 5*3600+30*60))
	body := `{"a":"<b>&</b>","u":"\u2028\u2029 é 😀"}` + "\x00\x1f\x7f\b\f\n\r\t\xff\xfe"
	for _, st := range []*JobStatus{
		{ID: "p.1", API: "a", Tier: "api", Pool: "p", State: JobPending, Submitted: at, Updated: at},
		{ID: "p.2", API: "a", Tier: "sandbox", Pool: "p", App: "app", User: "u", RequestID: "r-1", State: JobRunning,
			Attempts: 2, MaxAttempts: 5, Submitted: at, Updated: at.Add(time.Second), NextAttempt: &next,
			Reason: ReasonExpired, LastError: &JobError{Code: "GATEWAY_TIMEOUT", Status: 504, Message: "took \"long\""}},
		{ID: "p.3", State: JobSucceeded, Submitted: at, Updated: at, LastError: &JobError{Status: 500},
			Result: &JobResult{Status: 200, Headers: map[string][]string{"X-B": {"2", body}, "A": nil, "C": {}},
				Body: &body, Size: 7, Omitted: true, Stored: "p.3.r"},
			Callbacks: []CallbackStatus{{To: "https://x/cb?a=1&b=2", State: CallbackFailed, Attempts: 3, LastError: "503"}, {To: "s", State: CallbackPending}}},
		{ID: "p.4", State: JobSucceeded, Submitted: at, Updated: at, Result: &JobResult{Status: 204, Headers: map[string][]string{}, BodyBase64: []byte{0, 1, 0xff}}},
		{ID: "p.5", Submitted: time.Time{}, Updated: at, Callbacks: []CallbackStatus{}},
		{ID: "p.6", Submitted: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), Updated: at},
		{ID: "p.7", Submitted: at.In(time.FixedZone("far", 24*3600)), Updated: at},
		{ID: "p.8", Submitted: at.In(time.FixedZone("far", -24*3600)), Updated: at.In(time.FixedZone("near", 23*3600+59*60+59))},
		{ID: body, API: body, Tier: body, Pool: body, App: body, User: body, RequestID: body, State: body, Reason: body},
	} {
		sameAsEncodingJSON(t, st)
	}
}

func FuzzJobStatusJSON(f *testing.F) {
	f.Add("p.1", "<&>", "\u2028\xff", []byte("\x00b"), int64(1796650000123456789), 3)
	f.Add("", "\"\\", "é", []byte{}, int64(0), -1)
	f.Fuzz(func(t *testing.T, id, s1, s2 string, raw []byte, nanos int64, n int) {
		at := time.Unix(0, nanos).UTC()
		st := &JobStatus{ID: id, API: s1, Tier: s2, Pool: s1 + s2, App: s2, State: s1, Attempts: n, MaxAttempts: -n,
			Submitted: at, Updated: at.In(time.FixedZone("z", n%100000)), Reason: s2, // zones to ±27 h
			LastError: &JobError{Code: s1, Status: n, Message: s2},
			Result:    &JobResult{Status: n, Headers: map[string][]string{s1: {s2}, s2: nil}, Body: &s2, BodyBase64: raw, Size: len(raw)},
			Callbacks: []CallbackStatus{{To: s1, State: s2, Attempts: n, LastError: id}}}
		sameAsEncodingJSON(t, st)
	})
}
