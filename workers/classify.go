package workers

import (
	"context"
	"time"

	"github.com/jetway-gw/jetway/backend"
	"github.com/jetway-gw/jetway/expr"
	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/schemas"
)

// classify applies an API's one definition of a failed call to each
// backend answer (the innermost middleware: every attempt is judged, and
// the breaker, retry and fallback above it read the verdict in
// Response.Failed). The verdict travels to the edge with the reply, which
// counts the call by it. nil for an API without classify.
func (w *Worker) classify(a *registry.API) backend.Middleware {
	c := a.Classify
	if c == nil {
		return nil
	}
	ranges := c.StatusRanges()
	var cond *expr.Cond
	if c.FailureWhen != "" {
		var err error
		if cond, err = expr.Compile(c.FailureWhen); err != nil { // checked at publish
			w.log.Warn("classify condition not compiled; it is left out", "api", a.Name, "err", err)
		}
	}
	slow := time.Duration(c.Slow)
	ownStatuses := len(c.FailureStatuses) > 0 // else an adapter's own verdict stands (a gRPC RESOURCE_EXHAUSTED)
	name := a.Name
	return func(next backend.Backend) backend.Backend {
		return func(ctx context.Context, req *backend.Request) (*backend.Response, error) {
			var start time.Time
			if slow > 0 {
				start = time.Now()
			}
			resp, err := next(ctx, req)
			if err != nil || resp == nil {
				return resp, err // a gateway error: a failure whatever classify says
			}
			failed := !ownStatuses && resp.Failed
			for _, r := range ranges {
				if resp.Status >= r[0] && resp.Status <= r[1] {
					failed = true
					break
				}
			}
			if !failed && slow > 0 && time.Since(start) > slow {
				failed = true
			}
			if !failed && cond != nil {
				in := &expr.Input{Method: req.Method, Path: req.Path, Header: req.Header, RawQuery: req.RawQuery,
					App: req.App, Sandbox: req.API.ForSandbox(), ClientIP: req.ClientIP,
					Status: resp.Status, RespHeader: resp.Header, RespBody: resp.Body, Decode: schemas.DecodeJSON}
				holds, err := cond.Eval(in)
				if err != nil {
					// An answer the condition cannot read (not JSON, a
					// key it lacks) fails: a backend must not escape
					// failure_when by answering something else.
					w.log.Debug("classify condition failed to run; the answer counts as failed", "api", name, "err", err)
					holds = true
				}
				failed = holds
			}
			// A copy: an adapter may share one response among its calls
			// (a mock's).
			judged := *resp
			judged.Failed, judged.Classified = failed, true
			return &judged, nil
		}
	}
}
