package otel

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// Quantiles are within 1 % of the exact value.
func TestHistogramPrecision(t *testing.T) {
	h := newHistogram()
	r := rand.New(rand.NewPCG(1, 2))
	var all []time.Duration
	for i := 0; i < 100000; i++ {
		// log-normal-ish latencies from 50 µs to ~1 s
		d := time.Duration(math.Exp(r.NormFloat64()*1.5+math.Log(2e6))) + 50*time.Microsecond
		h.record(d)
		all = append(all, d)
	}
	slices.Sort(all)
	s := h.snapshot()
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		exact := all[int(math.Ceil(q*float64(len(all))))-1]
		got := s.quantile(q)
		if rel := math.Abs(float64(got-exact)) / float64(exact); rel > 0.011 {
			t.Errorf("p%v = %v, exact %v: off by %.2f%%", q*100, got, exact, rel*100)
		}
	}
	if s.total != 100000 || s.mean() <= 0 {
		t.Errorf("total %d mean %v", s.total, s.mean())
	}
	if bucketOf(0) != 0 || bucketOf(time.Hour) != histBuckets-1 {
		t.Error("out-of-range latencies not clamped")
	}
}

func BenchmarkHistogramRecord(b *testing.B) {
	h := newHistogram()
	b.RunParallel(func(pb *testing.PB) {
		d := 3 * time.Millisecond
		for pb.Next() {
			h.record(d)
		}
	})
}
