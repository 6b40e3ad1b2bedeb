// Package admin is Jetway's admin REST API: the registry's entries, switches,
// tokens and audit trail over HTTP, for operators, API owners and the
// console. It runs only where the admin NATS user is (jetway serve), never
// on an edge or a worker, and every request needs a token, loopback
// included.
//
// Every write goes through the registry client, the code path the CLI
// uses, so validation, compare-and-set and the audit trail are the same:
// a PUT or DELETE must name the revision it changes (If-Match, as the
// ETag of a GET gives it) and gets 412 when another write came first; a
// create of an existing name gets 409. The audit trail names the token.
package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	_ "embed" // the OpenAPI document
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/registry"
)

// Options configure the admin API.
type Options struct {
	Client *registry.Client
	// Bootstrap is the first admin token (jetway serve --admin-token),
	// valid without an entry: the one that makes the others. Empty: none.
	Bootstrap string
	Logger    *slog.Logger
	// Conn follows the cluster's per-second records for the live feed
	// (GET /v1/records/stream) and reads the SLA records and the report
	// schedules (/v1/reports); nil: none.
	Conn *nats.Conn
	// Nodes lists the live nodes (GET /v1/nodes); nil: none.
	Nodes func(now time.Time) []bus.Heartbeat
	// EdgeURL is the edge that POST /v1/apis/{name}/test sends an API's
	// saved cases to (http://host:port); "": none.
	EdgeURL string
}

// Server serves the admin API.
type Server struct {
	o       Options
	c       *registry.Client
	log     *slog.Logger
	boot    [sha256.Size]byte
	hasBoot bool
	live    chan struct{}       // the live streams open (maxLiveStreams)
	hub     liveHub             // their one subscription to the records
	js      jetstream.JetStream // over Conn: SLA records, report schedules; nil: none
	reports chan struct{}       // the reports being built (maxReports)
	// viewerReports are those of them a viewer builds (maxViewerReports);
	// reportBy, the principals building one (under reportMu).
	viewerReports chan struct{}
	reportMu      sync.Mutex
	reportBy      map[string]bool
}

// New returns the admin API over a registry client.
func New(o Options) *Server {
	s := &Server{o: o, c: o.Client, log: o.Logger, live: make(chan struct{}, maxLiveStreams), reports: make(chan struct{}, maxReports),
		viewerReports: make(chan struct{}, maxViewerReports), reportBy: map[string]bool{}}
	if o.Conn != nil {
		s.js, _ = jetstream.New(o.Conn) // fails only on a nil connection
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if o.Bootstrap != "" {
		s.boot, s.hasBoot = sha256.Sum256([]byte(o.Bootstrap)), true
	}
	return s
}

// MaxBody bounds a request body (an entry, a switch).
const MaxBody = 1 << 20

// requestTimeout bounds the registry work of one request (a var for the
// tests: export_test.go).
var requestTimeout = 10 * time.Second

//go:embed openapi.json
var openAPIDoc []byte

// Handler is the API under /v1/.
func (s *Server) Handler() http.Handler {
	r := chi.NewRouter()
	r.Use(s.authenticate)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "NOT_FOUND", "no such resource: "+r.URL.Path)
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED", r.Method+" is not served at "+r.URL.Path)
	})
	viewer, admin := registry.RoleViewer, registry.RoleAdmin
	r.Get("/v1/openapi.json", s.need(viewer, func(w http.ResponseWriter, _ *http.Request) {
		writeRaw(w, http.StatusOK, openAPIDoc)
	}))
	r.Get("/v1/whoami", s.need(viewer, s.whoami))
	r.Get("/v1/schemas/api", s.need(viewer, s.apiSchema))
	r.Get("/v1/degrade", s.need(viewer, s.listDegrade))
	r.Get("/v1/apis", s.need(viewer, s.listAPIs))
	r.Post("/v1/apis", s.need(admin, s.createAPI))
	r.Get("/v1/apis/{name}", s.need(viewer, s.getAPI))
	r.Put("/v1/apis/{name}", s.need(admin, s.putAPI))
	r.Delete("/v1/apis/{name}", s.need(admin, s.deleteAPI))
	r.Get("/v1/apis/{name}/revisions", s.need(viewer, s.apiRevisions))
	r.Post("/v1/apis/{name}/test", s.need(registry.RoleOperator, s.testAPI))
	r.Get("/v1/apis/{name}/draft", s.need(viewer, s.getDraft))
	r.Put("/v1/apis/{name}/draft", s.need(admin, s.putDraft))
	r.Delete("/v1/apis/{name}/draft", s.need(admin, s.deleteDraft))
	r.Post("/v1/apis/{name}/promote", s.need(admin, s.promoteAPI))
	degradeSwitch.route(s, r, "/v1/apis/{name}/degrade")
	faultSwitch.route(s, r, "/v1/apis/{name}/fault")
	r.Get("/v1/apis/{name}/channels", s.need(viewer, s.getChannels))
	r.Get("/v1/apis/{name}/channels/history", s.need(viewer, s.channelHistory))
	r.Put("/v1/apis/{name}/channels/{channel}/override", s.need(registry.RoleOperator, s.putChannelOverride))
	r.Delete("/v1/apis/{name}/channels/{channel}/override", s.need(registry.RoleOperator, s.deleteChannelOverride))
	r.Get("/v1/apis/{name}/release", s.need(viewer, s.getRelease))
	r.Post("/v1/apis/{name}/release", s.need(registry.RoleOperator, s.postRelease))
	r.Get("/v1/apps", s.need(viewer, s.listApps))
	r.Post("/v1/apps", s.need(admin, s.createApp))
	r.Get("/v1/apps/{id}", s.need(viewer, s.getApp))
	r.Post("/v1/apps/{id}/rotate-key", s.need(admin, s.rotateKey))
	r.Post("/v1/apps/{id}/rotate-secret", s.need(admin, s.rotateSecret))
	r.Put("/v1/apps/{id}/status", s.need(admin, s.setAppStatus))
	r.Put("/v1/apps/{id}/apis", s.need(admin, s.setAppAPIs))
	r.Post("/v1/apps/{id}/grants", s.need(admin, s.grantApp))
	r.Delete("/v1/apps/{id}/grants/{api}", s.need(admin, s.revokeApp))
	r.Put("/v1/apps/{id}/rate_limit", s.need(admin, s.setAppLimit))
	r.Get("/v1/alerts", s.need(viewer, s.listAlerts))
	r.Put("/v1/alerts/{name}", s.need(admin, s.putAlert))
	r.Delete("/v1/alerts/{name}", s.need(admin, s.deleteAlert))
	// A report reads up to 35 days of records: its own deadline
	// (reportTimeout), not a request's.
	r.Get("/v1/reports", s.needLive(viewer, s.getReport))
	r.Get("/v1/reports/schedules", s.need(viewer, s.listSchedules))
	r.Put("/v1/reports/schedules/{name}", s.need(admin, s.putSchedule))
	r.Delete("/v1/reports/schedules/{name}", s.need(admin, s.deleteSchedule))
	r.Get("/v1/audit", s.need(viewer, s.audit))
	r.Get("/v1/nodes", s.need(viewer, s.nodes))
	r.Get("/v1/topics", s.need(viewer, s.listTopics))
	r.Get("/v1/topics/{name}", s.need(viewer, s.getTopic))
	r.Put("/v1/topics/{name}", s.need(admin, s.putTopic))
	r.Delete("/v1/topics/{name}", s.need(admin, s.deleteTopic))
	r.Get("/v1/push/stats", s.need(viewer, s.pushStats))
	r.Get("/v1/push/connections", s.need(registry.RoleOperator, s.pushConnections))
	r.Post("/v1/push/kick", s.need(registry.RoleOperator, s.pushKick))
	r.Get("/v1/records/stream", s.needLive(viewer, s.records))
	r.Get("/v1/jobs/queues", s.need(viewer, s.jobQueues))
	r.Get("/v1/jobs/{id}", s.need(registry.RoleOperator, s.jobStatus))
	r.Get("/v1/deadletters", s.need(viewer, s.listDeadLetters))
	r.Delete("/v1/deadletters", s.need(admin, s.purgeDeadLetters))
	r.Get("/v1/deadletters/{seq}", s.need(registry.RoleOperator, s.getDeadLetter))
	r.Post("/v1/deadletters/{seq}/replay", s.need(registry.RoleOperator, s.replayDeadLetter))
	r.Get("/v1/tokens", s.need(admin, s.listTokens))
	r.Post("/v1/tokens", s.need(admin, s.createToken))
	r.Delete("/v1/tokens/{id}", s.need(admin, s.revokeToken))
	r.Get("/v1/secrets", s.need(admin, s.listSecrets))
	r.Put("/v1/secrets/{pool}/{name}", s.need(admin, s.putSecret))
	r.Delete("/v1/secrets/{pool}/{name}", s.need(admin, s.deleteSecret))
	return r
}

// principal is who a request is: the actor the audit trail names, and
// the role.
type principal struct {
	actor    string
	name, id string // the token's ("bootstrap-token", "" for the bootstrap one)
	role     registry.Role
}

type principalKey struct{}

// authenticate finds the request's token (Authorization: Bearer) and its
// role; a request without a valid one is refused here, whatever it asks.
// Tokens are compared as SHA-256 digests in constant time and never
// logged.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := bearer(r.Header.Get("Authorization"))
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="jetway-admin"`)
			writeError(w, http.StatusUnauthorized, "UNAUTHENTICATED", "the admin API needs Authorization: Bearer <admin token>")
			return
		}
		p, err := s.check(r.Context(), token)
		if err != nil {
			if errors.Is(err, registry.ErrBadToken) {
				w.Header().Set("WWW-Authenticate", `Bearer realm="jetway-admin", error="invalid_token"`)
				writeError(w, http.StatusUnauthorized, "UNAUTHENTICATED", "the token is not a valid admin token")
				return
			}
			s.log.Warn("admin token not checked", "err", err)
			writeError(w, http.StatusServiceUnavailable, "REGISTRY_UNAVAILABLE", "the token could not be checked: the registry is not reachable")
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	})
}

func (s *Server) check(ctx context.Context, token string) (principal, error) {
	if s.hasBoot {
		sum := sha256.Sum256([]byte(token))
		if subtle.ConstantTimeCompare(sum[:], s.boot[:]) == 1 {
			return principal{actor: "bootstrap-token", name: "bootstrap-token", role: registry.RoleAdmin}, nil
		}
	}
	if !strings.HasPrefix(token, "jwa_") {
		return principal{}, registry.ErrBadToken
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	t, err := s.c.CheckAdminToken(ctx, token)
	if err != nil {
		return principal{}, err
	}
	return principal{actor: "token:" + t.Name + "/" + t.ID, name: t.Name, id: t.ID, role: t.Role}, nil
}

// Whoami is the request's token as GET /v1/whoami answers it: its name,
// id and role, and the actor the audit trail names — never the token.
type Whoami struct {
	Name  string        `json:"name"`
	ID    string        `json:"id,omitempty"`
	Role  registry.Role `json:"role"`
	Actor string        `json:"actor"`
}

// whoami answers who the request's token is, for any role: what the
// console reads to offer only the actions the role may take.
func (s *Server) whoami(w http.ResponseWriter, r *http.Request) {
	p, _ := r.Context().Value(principalKey{}).(principal)
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, Whoami{Name: p.name, ID: p.id, Role: p.role, Actor: p.actor})
}

// bearer reads "Bearer <token>" (the scheme in any case, RFC 7235).
func bearer(h string) (string, bool) {
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// need runs h for a principal of at least role, with the registry client
// writing as that principal and the request's work bounded in time.
func (s *Server) need(role registry.Role, h func(w http.ResponseWriter, r *http.Request)) http.HandlerFunc {
	return s.needLive(role, func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
		defer cancel()
		h(w, r.WithContext(ctx))
	})
}

// needLive is need for a stream: the role checked, no deadline on the
// request's work.
func (s *Server) needLive(role registry.Role, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, _ := r.Context().Value(principalKey{}).(principal)
		if p.role < role {
			writeError(w, http.StatusForbidden, "FORBIDDEN", fmt.Sprintf("this needs the %s role; the token is %s", role, p.role))
			return
		}
		h(w, r)
	}
}

// client is the registry client writing as the request's principal. A
// write made whose audit record could not be stored answers as made, with
// a Warning saying the record is missing (a 5xx would have the caller
// retry a change that stands).
func (s *Server) client(w http.ResponseWriter, r *http.Request) *registry.Client {
	p, _ := r.Context().Value(principalKey{}).(principal)
	return s.c.As(p.actor).WithAuditErrors(func(err error) {
		s.log.Error("admin write not audited", "actor", p.actor, "err", err)
		w.Header().Add("Warning", `199 jetway "the change was written but not recorded in the audit trail"`)
	})
}

// role is the request's principal's role.
func role(r *http.Request) registry.Role {
	p, _ := r.Context().Value(principalKey{}).(principal)
	return p.role
}

// apiError is the body of every error the admin API answers.
type apiError struct {
	Code     string            `json:"code"`
	Message  string            `json:"message"`
	Problems []problem         `json:"problems,omitempty"`
	Revision uint64            `json:"current_revision,omitempty"`
	Extra    map[string]string `json:"details,omitempty"`
}

type problem struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, apiError{Code: code, Message: msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	writeRaw(w, status, append(b, '\n'))
}

// writeRaw answers JSON already encoded, never to be sniffed as anything
// else.
func writeRaw(w http.ResponseWriter, status int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// writeRegistryError answers a registry error with its status: a
// validation error 400 with every problem, a conflict 412 (or 409 on a
// create) naming the revision that won, a route held 409, a missing entry
// 404, a write that got no answer 504 (outcome unknown), anything else 503
// (the registry not reachable) or 500.
func writeRegistryError(w http.ResponseWriter, err error, log *slog.Logger) {
	var ve *registry.ValidationError
	var ce *registry.ConflictError
	var rc *registry.RouteConflictError
	var ue *registry.OutcomeUnknownError
	switch {
	case errors.As(err, &ue):
		// Before the deadline's case: it wraps one. The write may have
		// landed, so this is no 503 a client would retry blindly.
		log.Warn("admin write outcome unknown", "kind", ue.Kind, "key", ue.Key, "op", ue.Op, "err", ue.Err)
		writeOutcomeUnknown(w, ue)
		go settleLater(ue, log)
	case errors.As(err, &ve):
		e := apiError{Code: "INVALID_ENTRY", Message: "the entry is not valid; nothing was written"}
		for _, p := range ve.Problems {
			e.Problems = append(e.Problems, problem{Path: p.Path, Message: p.Message})
		}
		writeJSON(w, http.StatusBadRequest, e)
	case errors.As(err, &ce):
		if ce.Want == 0 {
			writeJSON(w, http.StatusConflict, apiError{Code: "EXISTS", Message: err.Error(), Revision: ce.Current})
			return
		}
		writeJSON(w, http.StatusPreconditionFailed, apiError{Code: "REVISION_CONFLICT", Message: err.Error(), Revision: ce.Current})
	case errors.As(err, &rc):
		writeJSON(w, http.StatusConflict, apiError{Code: "ROUTE_HELD", Message: err.Error(), Extra: map[string]string{"held_by": rc.HeldBy}})
	case errors.Is(err, registry.ErrNotFound):
		writeError(w, http.StatusNotFound, "NOT_FOUND", err.Error())
	case errors.Is(err, registry.ErrAuditKind):
		writeError(w, http.StatusBadRequest, "BAD_REQUEST", err.Error())
	case errors.Is(err, registry.ErrAuditNotRecorded):
		log.Error("admin write not audited", "err", err)
		writeError(w, http.StatusInternalServerError, "NOT_AUDITED", err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		writeError(w, http.StatusServiceUnavailable, "REGISTRY_UNAVAILABLE", "the registry did not answer in time")
	default:
		log.Warn("admin request failed", "err", err)
		writeError(w, http.StatusServiceUnavailable, "REGISTRY_UNAVAILABLE", err.Error())
	}
}

// How long after answering OUTCOME_UNKNOWN the admin API reads the write
// back, and how often.
var (
	settleFor   = 30 * time.Second
	settlePause = 500 * time.Millisecond
)

// settleLater reads back a write answered OUTCOME_UNKNOWN, for settleFor,
// and once it shows the write in force does what the write skipped: its
// audit record (settled by read-back) and follow-up steps
// (registry.OutcomeUnknownError.Resolve). The log says how it ended.
func settleLater(ue *registry.OutcomeUnknownError, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), settleFor)
	defer cancel()
	landed, err := ue.Resolve(ctx, settlePause)
	switch {
	case landed && err == nil:
		log.Info("admin write read back in force and settled", "kind", ue.Kind, "key", ue.Key, "op", ue.Op)
	case landed:
		log.Error("admin write read back in force, but what follows it did not all happen", "kind", ue.Kind, "key", ue.Key, "op", ue.Op, "err", err)
	default:
		log.Warn("admin write still not read back in force; its outcome stays unknown", "kind", ue.Kind, "key", ue.Key, "op", ue.Op, "for", settleFor)
	}
}

// writeOutcomeUnknown answers a write that JetStream did not answer in
// time: 504 OUTCOME_UNKNOWN, saying what was written and how to see
// whether it landed (details.check, a GET of the resource).
func writeOutcomeUnknown(w http.ResponseWriter, ue *registry.OutcomeUnknownError) {
	check := outcomeCheck(ue)
	how := "GET the resource"
	if check != "" {
		how = check
	}
	what := "the write of"
	if ue.Op == "delete" {
		what = "the delete of"
	}
	msg := fmt.Sprintf("outcome unknown: %s %s %s got no answer from the registry (JetStream) in time; it may or may not have landed, and may still land once JetStream has quorum. %s to see whether it is in force before retrying or reporting a failure", what, ue.Kind, ue.Key, how)
	extra := map[string]string{"operation": ue.Op, "kind": ue.Kind, "key": ue.Key}
	if check != "" {
		extra["check"] = check
	}
	writeJSON(w, http.StatusGatewayTimeout, apiError{Code: "OUTCOME_UNKNOWN", Message: msg, Extra: extra})
}

// outcomeCheck is the request that shows the key a write whose outcome is
// unknown was writing ("": none of this API's).
func outcomeCheck(ue *registry.OutcomeUnknownError) string {
	key := ue.Key
	switch ue.Bucket {
	case registry.BucketAPIs:
		if name, ok := strings.CutPrefix(key, registry.DraftPrefix); ok {
			return "GET /v1/apis/" + url.PathEscape(name) + "/draft"
		}
		return "GET /v1/apis/" + url.PathEscape(key)
	case registry.BucketFlags:
		if api, ok := strings.CutPrefix(key, registry.DegradePrefix); ok {
			return "GET /v1/apis/" + url.PathEscape(api) + "/degrade"
		}
		if api, ok := strings.CutPrefix(key, registry.FaultPrefix); ok {
			return "GET /v1/apis/" + url.PathEscape(api) + "/fault"
		}
	case registry.BucketApps:
		return "GET /v1/apps/" + url.PathEscape(key)
	case registry.BucketAlerts:
		return "GET /v1/alerts"
	case registry.BucketTopics:
		return "GET /v1/topics/" + url.PathEscape(key)
	case bus.BucketAdminTokens:
		return "GET /v1/tokens"
	case registry.BucketSecrets:
		// bus.SecretKey: name.pool
		if _, pool, ok := strings.Cut(key, "."); ok {
			return "GET /v1/secrets?pool=" + url.QueryEscape(pool)
		}
		return "GET /v1/secrets"
	}
	return ""
}

// readBody reads a request body of at most MaxBody; false when it answered
// the request (413, 400).
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		writeError(w, http.StatusRequestEntityTooLarge, "PAYLOAD_TOO_LARGE", fmt.Sprintf("the body is over %d bytes", MaxBody))
		return nil, false
	case err != nil:
		writeError(w, http.StatusBadRequest, "BAD_REQUEST", "the body could not be read: "+err.Error())
		return nil, false
	}
	return b, true
}

// etag is a revision as an entity tag.
func etag(rev uint64) string { return `"` + strconv.FormatUint(rev, 10) + `"` }

// ifMatch reads the revision a write names (If-Match: "N", a strong tag as
// a GET's ETag gives it); ok false when it answered the request: 428
// without one, 400 for one that is not a revision (a weak tag, "*", a
// list).
func ifMatch(w http.ResponseWriter, r *http.Request) (uint64, bool) {
	v := strings.TrimSpace(r.Header.Get("If-Match"))
	if v == "" {
		writeError(w, http.StatusPreconditionRequired, "PRECONDITION_REQUIRED",
			`a change names the revision it changes: If-Match with the ETag of a GET ("N"), so no other write is lost`)
		return 0, false
	}
	inner, ok := strings.CutPrefix(v, `"`)
	inner, ok2 := strings.CutSuffix(inner, `"`)
	n, err := strconv.ParseUint(inner, 10, 64)
	if !ok || !ok2 || err != nil || n == 0 {
		writeError(w, http.StatusBadRequest, "BAD_REQUEST", `If-Match must be one revision as a GET's ETag gives it ("N"), not a weak tag, a list or *`)
		return 0, false
	}
	return n, true
}

// readWrite reads what a PUT brings: the compare-and-set it asks for and
// its body; ok false when it answered the request.
func readWrite(w http.ResponseWriter, r *http.Request) (registry.WriteOption, []byte, bool) {
	opt, ok := writeOption(w, r)
	if !ok {
		return nil, nil, false
	}
	doc, ok := readBody(w, r)
	return opt, doc, ok
}

// sameName answers 400 unless an entry's name (got) is the one in the
// path (want).
func sameName(w http.ResponseWriter, what, want, got string) bool {
	if got == want {
		return true
	}
	writeJSON(w, http.StatusBadRequest, apiError{Code: "INVALID_ENTRY", Message: "the " + what + "'s name is not the path's",
		Problems: []problem{{Path: "name", Message: "must be " + strconv.Quote(want) + ", the name in the path"}}})
	return false
}

// writeOption is the compare-and-set a write asks for: If-None-Match: *
// (create only) or If-Match; ok false when it answered the request.
func writeOption(w http.ResponseWriter, r *http.Request) (registry.WriteOption, bool) {
	if r.Header.Get("If-None-Match") == "*" {
		return registry.IfRevision(0), true
	}
	rev, ok := ifMatch(w, r)
	if !ok {
		return nil, false
	}
	return registry.IfRevision(rev), true
}
