package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/jetway-gw/jetway/registry"
)

// PromoteOptions say how a draft is tested before it is promoted.
type PromoteOptions struct {
	// Edge is the edge the draft's cases are sent to, and Key a sandbox
	// app's API key they are sent with.
	Edge, Key string
	// HTTP sends the cases; nil: a client with a 5 s timeout.
	HTTP *http.Client
	// DraftRevision is the draft revision to promote (0: the current
	// one); another current revision is a conflict.
	DraftRevision uint64
	// ProductionRevision, when set, is the revision the production entry
	// must be at (0: it must not exist); nil: the one read before the
	// cases run.
	ProductionRevision *uint64
	// SkipCases promotes without running the cases (the audit trail says
	// "promote-untested").
	SkipCases bool
}

// Promotion is what a promote did.
type Promotion struct {
	API           string       `json:"api"`
	DraftRevision uint64       `json:"draft_revision"`
	Previous      uint64       `json:"previous_revision"` // the production revision replaced; 0: none
	Revision      uint64       `json:"revision"`          // the production entry's new revision; 0: not promoted
	Cases         []CaseResult `json:"cases,omitempty"`
	Untested      bool         `json:"untested,omitempty"`
}

var (
	// ErrNoCases refuses to promote a draft without saved cases, unless
	// told to skip them.
	ErrNoCases = errors.New("the draft has no saved cases (the entry's cases) to run before it is promoted")
	// ErrCasesFailed refuses to promote a draft whose cases did not all
	// pass.
	ErrCasesFailed = errors.New("a case of the draft failed; nothing was promoted")
)

// Promote is the one promote of a draft, for the CLI and the REST API: it
// reads the draft and the production revision, runs the draft's cases
// against that draft revision through an edge as a sandbox app
// (RunDraftCases), and only if they all pass copies the draft to the
// production entry by compare-and-set at the revision read before the
// cases ran (registry.Client.Promote). A change to either entry meanwhile
// is a *registry.ConflictError, and nothing is written.
func Promote(ctx context.Context, c *registry.Client, name string, o PromoteOptions) (Promotion, error) {
	p := Promotion{API: name}
	d, err := c.GetInForce(ctx, registry.DraftKey(name))
	if err != nil {
		return p, err
	}
	if d.API == nil || d.Newest != nil {
		return p, fmt.Errorf("the newest draft of %s does not validate: %w", name, d.NewestErr)
	}
	p.DraftRevision = d.Entry.Revision
	if o.DraftRevision != 0 && o.DraftRevision != p.DraftRevision {
		return p, &registry.ConflictError{Kind: "draft", Key: name, Want: o.DraftRevision, Current: p.DraftRevision}
	}
	cur, err := c.Get(ctx, name)
	switch {
	case err == nil:
		p.Previous = cur.Revision
	case !errors.Is(err, registry.ErrNotFound):
		return p, err
	}
	if want := o.ProductionRevision; want != nil && *want != p.Previous {
		return p, &registry.ConflictError{Kind: "api", Key: name, Want: *want, Current: p.Previous}
	}
	if !o.SkipCases {
		if len(d.API.Cases) == 0 {
			return p, ErrNoCases
		}
		client := o.HTTP
		if client == nil {
			client = &http.Client{Timeout: 5 * time.Second}
		}
		p.Cases = RunDraftCases(ctx, client, o.Edge, o.Key, d.API.Cases, p.DraftRevision)
		for _, r := range p.Cases {
			if len(r.Problems) > 0 {
				return p, ErrCasesFailed
			}
		}
	}
	p.Untested = o.SkipCases
	a, err := c.Promote(ctx, name, p.DraftRevision, p.Previous, !o.SkipCases)
	if a != nil {
		p.Revision = a.Revision
	}
	return p, err
}

// promoteRequest is the body of POST /v1/apis/{name}/promote.
type promoteRequest struct {
	Key           string  `json:"key"`
	DraftRevision uint64  `json:"draft_revision"`
	Production    *uint64 `json:"production_revision"`
	SkipCases     bool    `json:"skip_cases"`
}

// promoteAPI is POST /v1/apis/{name}/promote: Promote through this node's
// edge. 409 CASES_FAILED with each case's problems, or NO_CASES; 412 when
// the draft or the production entry changed.
func (s *Server) promoteAPI(w http.ResponseWriter, r *http.Request) {
	doc, ok := readBody(w, r)
	if !ok {
		return
	}
	var in promoteRequest
	if len(bytes.TrimSpace(doc)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(doc))
		dec.DisallowUnknownFields()
		err := dec.Decode(&in)
		if err == nil && dec.Decode(&struct{}{}) != io.EOF {
			err = errors.New("more after the object")
		}
		if err != nil {
			writeError(w, http.StatusBadRequest, "BAD_REQUEST", `the body is {"key", "draft_revision", "production_revision", "skip_cases"}: `+err.Error())
			return
		}
	}
	if !in.SkipCases && s.o.EdgeURL == "" {
		writeError(w, http.StatusConflict, "NO_EDGE", "this admin API has no edge to run the draft's cases through; skip_cases promotes untested")
		return
	}
	p, err := Promote(r.Context(), s.client(w, r), chi.URLParam(r, "name"), PromoteOptions{
		Edge: s.o.EdgeURL, Key: in.Key, DraftRevision: in.DraftRevision, ProductionRevision: in.Production, SkipCases: in.SkipCases})
	switch {
	case errors.Is(err, ErrCasesFailed):
		writeJSON(w, http.StatusConflict, map[string]any{"code": "CASES_FAILED", "message": err.Error(), "promotion": p})
	case errors.Is(err, ErrNoCases):
		writeError(w, http.StatusConflict, "NO_CASES", err.Error())
	case err != nil && p.Revision == 0:
		writeRegistryError(w, err, s.log)
	default: // promoted (a draft left behind is said in the log)
		if err != nil {
			s.log.Warn("promoted, with an error after", "api", p.API, "err", err)
		}
		if ue := (*registry.OutcomeUnknownError)(nil); errors.As(err, &ue) {
			// The draft's removal got no answer: it may still be there.
			go settleLater(ue, s.log)
			w.Header().Add("Warning", `199 jetway "promoted; the removal of the draft got no answer and may or may not have landed: GET /v1/apis/`+url.PathEscape(p.API)+`/draft"`)
		}
		w.Header().Set("ETag", etag(p.Revision))
		writeJSON(w, http.StatusOK, p)
	}
}
