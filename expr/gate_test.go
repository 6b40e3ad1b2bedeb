package expr_test

import (
	"testing"

	"github.com/jetway-gw/jetway/expr"
)

func TestGate(t *testing.T) {
	g, err := expr.CompileGate("canary.error_rate > 2.0 * stable.error_rate + 0.01 || canary.p99_ms > 300.0")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		canary, stable map[string]float64
		want           bool
	}{
		{map[string]float64{"error_rate": 0.01, "p99_ms": 100}, map[string]float64{"error_rate": 0.01}, false},
		{map[string]float64{"error_rate": 0.05, "p99_ms": 100}, map[string]float64{"error_rate": 0.01}, true},
		{map[string]float64{"error_rate": 0, "p99_ms": 500}, map[string]float64{"error_rate": 0}, true},
	} {
		got, err := g.Eval(tc.canary, tc.stable, map[string]float64{})
		if err != nil || got != tc.want {
			t.Errorf("%v vs %v: %v %v, want %v", tc.canary, tc.stable, got, err, tc.want)
		}
	}
	for _, bad := range []string{"canary.error_rate", "request.method == 'GET'", "canary.error_rate >"} {
		if _, err := expr.CompileGate(bad); err == nil {
			t.Errorf("%q compiled", bad)
		}
	}
	// A figure the maps lack is an error at run time, not a silent pass.
	g2, _ := expr.CompileGate("canary.nope > 1.0")
	if _, err := g2.Eval(map[string]float64{}, map[string]float64{}, map[string]float64{}); err == nil {
		t.Error("a missing figure evaluated")
	}
}
