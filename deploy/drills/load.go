package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"
)

// window is the span availability is counted over: a year has 105,120.
const window = 5 * time.Minute

// load calls drill.main (and, for a backend drill, drill.other) from
// callers in a loop, each at an even pace, and tallies what they saw.
type load struct {
	entry       string
	callers     int
	every       time.Duration // each caller's pace
	other       bool
	client      *http.Client
	mu          sync.Mutex
	main, oth   tally
	windows     map[time.Time]*count
	firstFailed time.Time
	lastFailed  time.Time
}

type count struct{ Calls, OK, BackendFailed int }

// tally is one API's calls.
type tally struct {
	count
	failures []string // the first ones, for the report
	longest  time.Duration
	failedIn []time.Duration
}

func newLoad(entry string, callers, rate int, other bool) *load {
	tr := &http.Transport{MaxIdleConnsPerHost: callers * 2, IdleConnTimeout: 30 * time.Second}
	return &load{entry: entry, callers: callers, other: other, every: time.Duration(callers) * time.Second / time.Duration(rate),
		client: &http.Client{Transport: tr, Timeout: 10 * time.Second}, windows: map[time.Time]*count{}}
}

func (l *load) run(ctx context.Context) {
	var wg sync.WaitGroup
	for i := range l.callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			next := time.Now().Add(time.Duration(i) * l.every / time.Duration(l.callers))
			for n := 0; ; n++ {
				if d := time.Until(next); d > 0 {
					select {
					case <-ctx.Done():
						return
					case <-time.After(d):
					}
				}
				if ctx.Err() != nil {
					return
				}
				next = next.Add(l.every)
				path := "/drill"
				if l.other && n%2 == 1 {
					path = "/other"
				}
				l.call(path)
			}
		}()
	}
	wg.Wait()
}

// call makes one call and counts it: a failure is the backend's when the
// backend was unreachable (BAD_GATEWAY) or had its breaker opened
// (CIRCUIT_OPEN); any other — a gateway error code, the load balancer's
// own error, or the connection failing — is the gateway's.
func (l *load) call(path string) {
	start := time.Now()
	status, code, err := l.get(path)
	took := time.Since(start)
	ok := err == nil && status == http.StatusOK
	// The drills' backends answer nothing but 200: a status without a
	// gateway code is the load balancer's (haproxy's 503 when no edge is
	// ready), and counts against availability.
	backend := !ok && err == nil && (code == "BAD_GATEWAY" || code == "CIRCUIT_OPEN")
	l.mu.Lock()
	defer l.mu.Unlock()
	t := &l.main
	if path == "/other" {
		t = &l.oth
	}
	t.Calls++
	t.longest = max(t.longest, took)
	switch {
	case ok:
		t.OK++
	case backend:
		t.BackendFailed++
		t.failedIn = append(t.failedIn, took)
	default:
		t.failedIn = append(t.failedIn, took)
		if len(t.failures) < 20 {
			what := fmt.Sprintf("%d %s", status, code)
			if err != nil {
				what = err.Error()
			}
			t.failures = append(t.failures, fmt.Sprintf("%s %s after %s: %s", start.Format("15:04:05.000"), path, took.Round(time.Millisecond), what))
		}
		if path == "/drill" {
			if l.firstFailed.IsZero() {
				l.firstFailed = start
			}
			l.lastFailed = start.Add(took)
		}
	}
	if path == "/drill" {
		w := start.Truncate(window)
		c := l.windows[w]
		if c == nil {
			c = &count{}
			l.windows[w] = c
		}
		c.Calls++
		if ok {
			c.OK++
		} else if backend {
			c.BackendFailed++
		}
	}
}

func (l *load) get(path string) (status int, code string, err error) {
	r, err := l.client.Get(l.entry + path)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = r.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil {
		return r.StatusCode, "", err
	}
	if r.StatusCode != http.StatusOK {
		var e struct {
			Code string `json:"code"`
		}
		_ = json.Unmarshal(b, &e)
		code = e.Code
	}
	return r.StatusCode, code, nil
}

// result is what a drill printed: availability of drill.main per window
// and over the drill, its failures, its longest call, the time from the
// fault to the end of the last failed call; for a backend drill, how
// fast drill.other's calls failed.
type result struct {
	Drill       string          `json:"drill"`
	Fault       string          `json:"fault"`
	FaultAt     time.Time       `json:"fault_at"`
	Concurrency int             `json:"callers"`
	Calls       int             `json:"calls"`
	Failed      int             `json:"failed"` // the gateway's
	BackendFail int             `json:"failed_by_backend"`
	Windows     []windowResult  `json:"windows"`
	Worst       float64         `json:"worst_window_availability"`
	Longest     float64         `json:"longest_call_ms"`
	Recovered   float64         `json:"recovered_after_ms"` // 0: no call failed
	Failures    []string        `json:"failures,omitempty"`
	Other       *otherAPIResult `json:"other,omitempty"`
	Target      float64         `json:"target"`
	Met         bool            `json:"met"`
}

type windowResult struct {
	Start        time.Time `json:"start"`
	Calls        int       `json:"calls"`
	OK           int       `json:"ok"`
	Availability float64   `json:"availability"`
}

type otherAPIResult struct {
	Calls, Failed   int
	FailedP99Millis float64 `json:"failed_p99_ms"`
}

func (l *load) result(d drill, faultAt time.Time) *result {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := &result{Drill: d.name, Fault: d.what, FaultAt: faultAt, Calls: l.main.Calls, BackendFail: l.main.BackendFailed,
		Failed: l.main.Calls - l.main.OK - l.main.BackendFailed, Longest: ms(l.main.longest), Failures: l.main.failures,
		Target: d.target, Worst: 100}
	starts := make([]time.Time, 0, len(l.windows))
	for w := range l.windows {
		starts = append(starts, w)
	}
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	for _, w := range starts {
		c := l.windows[w]
		a := availability(*c)
		r.Windows = append(r.Windows, windowResult{Start: w, Calls: c.Calls, OK: c.OK, Availability: a})
		r.Worst = min(r.Worst, a)
	}
	if !l.lastFailed.IsZero() && l.lastFailed.After(faultAt) {
		r.Recovered = ms(l.lastFailed.Sub(faultAt))
	}
	if d.other {
		slices.Sort(l.oth.failedIn)
		o := &otherAPIResult{Calls: l.oth.Calls, Failed: l.oth.Calls - l.oth.OK}
		if n := len(l.oth.failedIn); n > 0 {
			o.FailedP99Millis = ms(l.oth.failedIn[min(n-1, n*99/100)])
		}
		r.Other = o
	}
	return r
}

// availability is successes ÷ calls, leaving out the failures the backend
// caused, in percent.
func availability(c count) float64 {
	n := c.Calls - c.BackendFailed
	if n == 0 {
		return 100
	}
	return 100 * float64(c.OK) / float64(n)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func (r *result) print(w io.Writer) {
	fmt.Fprintf(w, "drill %s: %s, at %s, under %d callers\n", r.Drill, r.Fault, r.FaultAt.Format("15:04:05.000"), r.Concurrency)
	for _, win := range r.Windows {
		fmt.Fprintf(w, "  window %s (5m): %d calls, %d ok, availability %.4f%%\n", win.Start.Format("15:04"), win.Calls, win.OK, win.Availability)
	}
	rec := "no call failed"
	if r.Recovered > 0 {
		rec = fmt.Sprintf("%.0f ms after the fault", r.Recovered)
	}
	fmt.Fprintf(w, "  calls failed: %d (and %d by the backend)   longest call: %.0f ms   recovered: %s\n", r.Failed, r.BackendFail, r.Longest, rec)
	for _, f := range r.Failures {
		fmt.Fprintf(w, "    %s\n", f)
	}
	if r.Other != nil {
		fmt.Fprintf(w, "  drill.other (backend stopped): %d calls, %d failed, failures answered in %.0f ms (p99)\n", r.Other.Calls, r.Other.Failed, r.Other.FailedP99Millis)
	}
	verdict := "met"
	if !r.Met {
		verdict = "MISSED"
	}
	fmt.Fprintf(w, "  target ≥ %.2f%% per window: %s (worst window %.4f%%)\n\n", r.Target, verdict, r.Worst)
}
