package otel

import (
	"math"
	"sync/atomic"
	"time"
)

// Latency histograms with ~1 % relative precision: bucket bounds grow by
// 2 % from 1 µs to 2 min, so a quantile read from the bucket's midpoint is
// within 1 % of the true value. Recording is one atomic add; there are no
// locks.
const (
	histMin    = float64(time.Microsecond)
	histGrowth = 1.02
	histMax    = float64(2 * time.Minute)
)

var (
	histLogGrowth = math.Log(histGrowth)
	histBuckets   = int(math.Ceil(math.Log(histMax/histMin)/histLogGrowth)) + 2 // + underflow and overflow
)

// bucketOf is the bucket of a latency: 0 for ≤ 1 µs, the last for ≥ 2 min.
func bucketOf(d time.Duration) int {
	v := float64(d)
	if v <= histMin {
		return 0
	}
	b := int(math.Log(v/histMin)/histLogGrowth) + 1
	return min(b, histBuckets-1)
}

// bucketValue is a representative latency of bucket b (the geometric
// middle of its bounds).
func bucketValue(b int) time.Duration {
	if b == 0 {
		return time.Microsecond
	}
	lo := histMin * math.Pow(histGrowth, float64(b-1))
	return time.Duration(lo * math.Sqrt(histGrowth))
}

// histogram counts latencies.
type histogram struct {
	counts []atomic.Int64
	total  atomic.Int64
	sum    atomic.Int64 // nanoseconds
}

func newHistogram() *histogram { return &histogram{counts: make([]atomic.Int64, histBuckets)} }

func (h *histogram) record(d time.Duration) {
	h.counts[bucketOf(d)].Add(1)
	h.total.Add(1)
	h.sum.Add(int64(d))
}

// snapshot copies the counts (not atomically as a whole: good enough for
// monitoring).
func (h *histogram) snapshot() histSnapshot {
	s := histSnapshot{counts: make([]int64, histBuckets)}
	for i := range h.counts {
		s.counts[i] = h.counts[i].Load()
		s.total += s.counts[i]
	}
	s.sum = time.Duration(h.sum.Load())
	return s
}

// reset zeroes the histogram (only when no one records into it).
func (h *histogram) reset() {
	for i := range h.counts {
		h.counts[i].Store(0)
	}
	h.total.Store(0)
	h.sum.Store(0)
}

type histSnapshot struct {
	counts []int64
	total  int64
	sum    time.Duration
}

// quantile returns the q-quantile (0 < q ≤ 1), 0 without data.
func (s histSnapshot) quantile(q float64) time.Duration {
	if s.total == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(s.total)))
	var seen int64
	for b, c := range s.counts {
		seen += c
		if seen >= rank {
			return bucketValue(b)
		}
	}
	return bucketValue(len(s.counts) - 1)
}

// mean is the average latency, 0 without data.
func (s histSnapshot) mean() time.Duration {
	if s.total == 0 {
		return 0
	}
	return s.sum / time.Duration(s.total)
}

// below counts the latencies ≤ d (to the bucket's precision).
func (s histSnapshot) below(d time.Duration) int64 {
	last := bucketOf(d)
	var n int64
	for b := 0; b <= last && b < len(s.counts); b++ {
		n += s.counts[b]
	}
	return n
}
