package expr

import (
	"errors"
	"fmt"
	"sync"

	"cel.dev/cel-go/cel"
)

// A gate is a condition on a release step's figures rather than on one
// call: it knows three variables, canary, stable and shadow (all zero
// without a shadow), each a map of numbers —
// calls, failures, error_rate (0..1), p99_ms, mean_ms, mismatches (shadow
// answers whose status differed). The step is breached when it holds:
//
//	canary.error_rate > 2.0 * stable.error_rate + 0.01
var gateEnv = sync.OnceValues(func() (*cel.Env, error) {
	m := cel.MapType(cel.StringType, cel.DoubleType)
	return cel.NewEnv(cel.Variable("canary", m), cel.Variable("stable", m), cel.Variable("shadow", m))
})

// Gate is a compiled gate condition; safe for concurrent use.
type Gate struct {
	src string
	prg cel.Program
}

// CompileGate parses and checks a gate condition.
func CompileGate(src string) (*Gate, error) {
	if len(src) > MaxLength {
		return nil, fmt.Errorf("a condition may have at most %d characters, not %d", MaxLength, len(src))
	}
	e, err := gateEnv()
	if err != nil {
		return nil, err
	}
	ast, iss := e.Compile(src)
	if iss.Err() != nil {
		return nil, iss.Err()
	}
	if ast.OutputType() != cel.BoolType {
		return nil, fmt.Errorf("a gate must be true or false, not %v", ast.OutputType())
	}
	prg, err := e.Program(ast, cel.CostLimit(MaxCost))
	if err != nil {
		return nil, err
	}
	return &Gate{src: src, prg: prg}, nil
}

func (g *Gate) String() string { return g.src }

// Eval runs the gate on the step's figures.
func (g *Gate) Eval(canary, stable, shadow map[string]float64) (bool, error) {
	out, _, err := g.prg.Eval(map[string]any{"canary": canary, "stable": stable, "shadow": shadow})
	if err != nil {
		return false, err
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, errors.New("the gate is not true or false")
	}
	return b, nil
}
