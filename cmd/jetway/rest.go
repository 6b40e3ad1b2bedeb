package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jetway-gw/jetway/admin"
	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/schemas"
)

// The CLI over the admin REST API (--admin-url): the commands that have a
// REST form send it to serve's or jetway admin's /v1/ instead of writing
// the registry over NATS. The business operations are the server's, the
// code path its console uses too; the CLI only names the revision each
// write is at, reading it first when --if-revision does not give it, so
// a write over REST is always a compare-and-set.

// adminFlags are where the admin REST API is and the token to use.
type adminFlags struct{ url, token *string }

func addAdminFlags(fs *flag.FlagSet) adminFlags {
	return adminFlags{
		url:   fs.String("admin-url", os.Getenv("JETWAY_ADMIN_URL"), "go through this admin REST API (http(s)://host:port of serve's or jetway admin's --admin) instead of NATS (env JETWAY_ADMIN_URL)"),
		token: fs.String("admin-token", os.Getenv("JETWAY_ADMIN_TOKEN"), "the admin API token, with --admin-url (env JETWAY_ADMIN_TOKEN)"),
	}
}

// use reports whether a command line goes over REST: with an admin URL,
// unless --nats was given and the URL only comes from the environment;
// hasForm says whether the command has a REST form (without one, an
// admin URL from the environment leaves it on NATS).
func (a adminFlags) use(fs *flag.FlagSet, hasForm bool) (bool, error) {
	if *a.url == "" {
		return false, nil
	}
	set := given(fs)
	explicit := slices.Contains(set, "admin-url")
	switch {
	case slices.Contains(set, "nats") && explicit:
		return false, fmt.Errorf("%w: --admin-url and --nats: give one (the admin API reaches NATS itself)", errUsage)
	case slices.Contains(set, "nats"):
		return false, nil // JETWAY_ADMIN_URL is set, but --nats asks for NATS
	case !hasForm && explicit:
		return false, fmt.Errorf("%w: this command has no --admin-url form yet: it goes over NATS (--nats)", errUsage)
	}
	return hasForm, nil
}

// restClient calls the admin REST API.
type restClient struct {
	base, token string
	hc          *http.Client
}

func (a adminFlags) client(timeout time.Duration) (*restClient, error) {
	u, err := url.Parse(*a.url)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: --admin-url %q: want http(s)://host:port", errUsage, *a.url)
	}
	if *a.token == "" {
		return nil, fmt.Errorf("%w: --admin-url needs --admin-token (or JETWAY_ADMIN_TOKEN)", errUsage)
	}
	// A redirect is not followed: it could turn a write into a read that
	// looks like success, or carry the token to another port or scheme.
	hc := &http.Client{Timeout: timeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &restClient{base: strings.TrimRight(*a.url, "/"), token: *a.token, hc: hc}, nil
}

// given lists the flags a command line set.
func given(fs *flag.FlagSet) []string {
	var out []string
	fs.Visit(func(f *flag.Flag) { out = append(out, f.Name) })
	return out
}

// refuseOverREST refuses flags that mean nothing over REST when a command
// line set them, rather than ignore them.
func refuseOverREST(fs *flag.FlagSet, flags ...string) error {
	set := given(fs)
	for _, f := range flags {
		if slices.Contains(set, f) {
			return fmt.Errorf("%w: --%s has no meaning with --admin-url (the admin API goes through its own edge and NATS)", errUsage, f)
		}
	}
	return nil
}

// decode reads an answer's JSON into v; an answer that is not (a proxy's
// page, one cut at the read limit) is an error, never an empty result.
func decode(a restAnswer, v any) error {
	if len(a.body) >= maxRESTAnswer {
		return fmt.Errorf("admin API: the answer is over %d MiB", maxRESTAnswer>>20)
	}
	if err := json.Unmarshal(a.body, v); err != nil {
		return fmt.Errorf("admin API: the answer is not the API's JSON (%v): %.200s", err, a.body)
	}
	return nil
}

// maxRESTAnswer bounds an answer the CLI reads.
const maxRESTAnswer = 64 << 20

// restAnswer is an answer of the admin API.
type restAnswer struct {
	status int
	etag   uint64 // the ETag's revision; 0: none
	body   []byte
}

// call sends one request (body nil: none) and reads the answer whole.
func (c *restClient) call(ctx context.Context, method, path string, body []byte, hdr ...string) (restAnswer, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return restAnswer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return restAnswer{}, fmt.Errorf("admin API: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode/100 == 3 {
		return restAnswer{}, fmt.Errorf("admin API: %s %s answered %d, to %q: give that as --admin-url (redirects are not followed)", method, path, resp.StatusCode, resp.Header.Get("Location"))
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxRESTAnswer))
	if err != nil {
		return restAnswer{}, fmt.Errorf("admin API: reading the answer: %w", err)
	}
	a := restAnswer{status: resp.StatusCode, body: b}
	a.etag, _ = strconv.ParseUint(strings.Trim(resp.Header.Get("ETag"), `"`), 10, 64)
	return a, nil
}

// getJSON reads the 200 answer of GET path into v (kind names what is
// read in errors).
func (c *restClient) getJSON(ctx context.Context, kind, path string, v any) error {
	a, err := c.call(ctx, http.MethodGet, path, nil)
	if err != nil {
		return err
	}
	if a.status != http.StatusOK {
		return restError(kind, "", 0, a)
	}
	return decode(a, v)
}

// restError is the registry's error for an admin API error answer, so the
// CLI says it and exits as over NATS: invalid entries list their problems
// (exit 1), conflicts exit 3, a missing entry is ErrNotFound.
func restError(kind, key string, want uint64, a restAnswer) error {
	var e struct {
		Code     string `json:"code"`
		Message  string `json:"message"`
		Revision uint64 `json:"current_revision"`
		Problems []struct {
			Path    string `json:"path"`
			Message string `json:"message"`
		} `json:"problems"`
	}
	_ = json.Unmarshal(a.body, &e)
	switch e.Code {
	case "INVALID_ENTRY":
		ve := &registry.ValidationError{Key: key}
		for _, p := range e.Problems {
			ve.Problems = append(ve.Problems, schemas.Problem{Path: p.Path, Message: p.Message})
		}
		return ve
	case "REVISION_CONFLICT", "EXISTS":
		return &registry.ConflictError{Kind: kind, Key: key, Want: want, Current: e.Revision}
	case "NOT_FOUND":
		return fmt.Errorf("%s %s: %w", kind, key, registry.ErrNotFound)
	case "":
		return fmt.Errorf("admin API: %d: %.300s", a.status, a.body)
	}
	return fmt.Errorf("admin API: %s: %s", e.Code, e.Message)
}

// precondition is the header pair of a write at revision rev (0: create).
func precondition(rev uint64) []string {
	if rev == 0 {
		return []string{"If-None-Match", "*"}
	}
	return []string{"If-Match", `"` + strconv.FormatUint(rev, 10) + `"`}
}

// revisionOf is the revision a write to path is at: --if-revision's, else
// the one a read finds now (0: none).
func (c *restClient) revisionOf(ctx context.Context, path string, ifRev revisionFlag) (uint64, error) {
	if ifRev.set {
		return ifRev.rev, nil
	}
	a, err := c.call(ctx, http.MethodGet, path, nil)
	switch {
	case err != nil:
		return 0, err
	case a.status == http.StatusNotFound:
		return 0, nil
	case a.etag != 0:
		return a.etag, nil // a stored value that does not validate (409) has one too: the write that mends or clears it is at that revision
	}
	return 0, restError("api", path, 0, a)
}

// apiOverREST is `jetway api` with --admin-url.
func apiOverREST(c *restClient, cmd, name string, onDraft bool, doc []byte, ifRev revisionFlag, prom promoteFlags, stdout, stderr io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), c.hc.Timeout)
	defer cancel()
	path := "/v1/apis/" + url.PathEscape(name)
	key := name
	if onDraft {
		path, key = path+"/draft", registry.DraftKey(name)
	}
	switch cmd {
	case "get":
		a, err := c.call(ctx, http.MethodGet, path, nil)
		if err != nil {
			return err
		}
		if a.status != http.StatusOK {
			return restError("api", key, 0, a)
		}
		printJSON(stdout, a.body)
	case "list":
		var res struct {
			Items []admin.APIItem `json:"items"`
		}
		if err := c.getJSON(ctx, "api", "/v1/apis", &res); err != nil {
			return err
		}
		return printAPIList(stdout, stderr, inForceOf(res.Items))
	case "put":
		rev, err := c.revisionOf(ctx, path, ifRev)
		if err != nil {
			return err
		}
		a, err := c.call(ctx, http.MethodPut, path, doc, precondition(rev)...)
		if err != nil {
			return err
		}
		if a.status != http.StatusOK {
			return describeInvalid(restError("api", key, rev, a), stderr, "API entry")
		}
		parsed, _ := registry.ParseAPI("", doc)
		what := "published"
		if onDraft {
			what = "wrote the draft of"
		}
		fmt.Fprintf(stdout, "%s %s (%s %s -> pool %s) at revision %d\n", what, name, parsed.Route.Method, parsed.Route.Path, parsed.Pool, a.etag)
	case "delete":
		rev, err := c.revisionOf(ctx, path, ifRev)
		if err != nil {
			return err
		}
		if rev == 0 {
			return fmt.Errorf("api %s: %w", key, registry.ErrNotFound)
		}
		a, err := c.call(ctx, http.MethodDelete, path, nil, precondition(rev)...)
		if err != nil {
			return err
		}
		if a.status != http.StatusNoContent {
			return restError("api", key, rev, a)
		}
		fmt.Fprintf(stdout, "deleted %s\n", key)
	case "test":
		body, _ := json.Marshal(map[string]any{"key": prom.key, "draft": onDraft})
		a, err := c.call(ctx, http.MethodPost, "/v1/apis/"+url.PathEscape(name)+"/test", body)
		if err != nil {
			return err
		}
		if a.status != http.StatusOK {
			return restError("api", key, 0, a)
		}
		var res struct {
			Revision uint64             `json:"revision"`
			Items    []admin.CaseResult `json:"items"`
		}
		if err := decode(a, &res); err != nil {
			return err
		}
		failed := printCases(stdout, res.Items)
		fmt.Fprintf(stdout, "%d of %d cases passed (api %s at revision %d, through %s)\n", len(res.Items)-failed, len(res.Items), key, res.Revision, c.base)
		if failed > 0 {
			return fmt.Errorf("%d case(s) of api %s failed", failed, key)
		}
	case "promote":
		in := map[string]any{"key": prom.key, "skip_cases": prom.skipCases}
		if prom.draftRev != 0 {
			in["draft_revision"] = prom.draftRev
		}
		if prom.prodRev != nil {
			in["production_revision"] = *prom.prodRev
		}
		body, _ := json.Marshal(in)
		a, err := c.call(ctx, http.MethodPost, "/v1/apis/"+url.PathEscape(name)+"/promote", body)
		if err != nil {
			return err
		}
		var failed struct {
			Code      string          `json:"code"`
			Promotion admin.Promotion `json:"promotion"`
		}
		switch _ = json.Unmarshal(a.body, &failed); {
		case a.status == http.StatusOK:
			var p admin.Promotion
			if err := decode(a, &p); err != nil {
				return err
			}
			printCases(stdout, p.Cases)
			printPromotion(stdout, p, c.base)
		case failed.Code == "CASES_FAILED":
			printCases(stdout, failed.Promotion.Cases)
			return admin.ErrCasesFailed
		case failed.Code == "NO_CASES":
			return admin.ErrNoCases
		default:
			want := prom.draftRev
			if prom.prodRev != nil {
				want = *prom.prodRev
			}
			return restError("api", name, want, a)
		}
	default:
		return fmt.Errorf("%w: jetway api %s has no --admin-url form yet (it goes over NATS)", errUsage, cmd)
	}
	return nil
}

// inForceOf is GET /v1/apis's items as the CLI lists them.
func inForceOf(items []admin.APIItem) []registry.InForce {
	out := make([]registry.InForce, 0, len(items))
	for _, it := range items {
		f := registry.InForce{Entry: registry.Entry{Name: it.Name, Revision: it.Revision, Op: "PUT", Value: it.Entry}}
		if a, err := registry.ParseAPI(it.Name, it.Entry); err == nil {
			f.API = a
		}
		if it.Invalid != "" {
			f.Newest = &registry.Entry{Name: it.Name, Revision: it.Newest}
			f.NewestErr = errors.New(it.Invalid)
		}
		if f.API == nil && f.Newest == nil {
			f.Newest = &registry.Entry{Name: it.Name, Revision: it.Revision}
		}
		out = append(out, f)
	}
	return out
}

// degradeOverREST is `jetway degrade on|off` with --admin-url.
func degradeOverREST(c *restClient, cmd, api string, sw *registry.Degrade, ahead bool, stdout, stderr io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), c.hc.Timeout)
	defer cancel()
	if cmd == "list" {
		var res struct {
			Items []admin.DegradeItem `json:"items"`
		}
		if err := c.getJSON(ctx, "degrade", "/v1/degrade", &res); err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "API\tSTATE\tSTATUS\tREASON\tREVISION")
		for _, it := range res.Items {
			var sw registry.Degrade
			if it.Invalid != "" || json.Unmarshal(it.Switch, &sw) != nil {
				fmt.Fprintf(tw, "%s\tinvalid\t-\t%s\t%d\n", it.API, it.Invalid, it.Revision)
				continue
			}
			fmt.Fprintf(tw, "%s\ton\t%d\t%s\t%d\n", it.API, statusOr(sw.Status), sw.Reason, it.Revision)
		}
		return tw.Flush()
	}
	path := "/v1/apis/" + url.PathEscape(api) + "/degrade"
	rev, err := c.revisionOf(ctx, path, revisionFlag{})
	if err != nil {
		return err
	}
	switch cmd {
	case "on":
		if !ahead {
			// As over NATS: a switch that would do nothing is a typo.
			got, err := c.call(ctx, http.MethodGet, "/v1/apis/"+url.PathEscape(api), nil)
			if err != nil {
				return err
			}
			a, perr := registry.ParseAPI(api, got.body)
			if got.status != http.StatusOK || perr != nil {
				return fmt.Errorf("api %s is not published, so the switch would do nothing; check the name (jetway api list), or pass --ahead to set it before the API is published", api)
			}
			if err := checkDegradeAPI(a, api, sw); err != nil {
				return err
			}
		}
		a, err := c.call(ctx, http.MethodPut, path, sw.Marshal(), precondition(rev)...)
		if err != nil {
			return err
		}
		if a.status != http.StatusOK && a.status != http.StatusCreated {
			return describeInvalid(restError("degrade", api, rev, a), stderr, "degrade switch")
		}
		fmt.Fprintf(stdout, "degraded %s (status %d) at revision %d\n", api, statusOr(sw.Status), a.etag)
	case "off":
		if rev == 0 {
			fmt.Fprintf(stdout, "%s is served again\n", api) // no switch: nothing to clear
			return nil
		}
		a, err := c.call(ctx, http.MethodDelete, path, nil, precondition(rev)...)
		if err != nil {
			return err
		}
		if a.status != http.StatusNoContent && a.status != http.StatusNotFound {
			return restError("degrade", api, rev, a)
		}
		fmt.Fprintf(stdout, "%s is served again\n", api)
	default:
		return fmt.Errorf("%w: jetway degrade %s has no --admin-url form yet (it goes over NATS)", errUsage, cmd)
	}
	return nil
}

// appOverREST is `jetway app` with --admin-url: create (app is the new
// app, withHMAC its secret), get, list, disable, enable, rotate-key,
// rotate-secret, grant and revoke, each one request the server applies by
// compare-and-set on the app.
func appOverREST(c *restClient, pos []string, app *registry.App, withHMAC bool, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), c.hc.Timeout)
	defer cancel()
	id := ""
	if len(pos) > 1 {
		id = pos[1]
	}
	path := "/v1/apps/" + url.PathEscape(id)
	var method, at string
	var body []byte
	want := http.StatusOK
	switch pos[0] {
	case "list":
		var res struct {
			Items []admin.AppView `json:"items"`
		}
		if err := c.getJSON(ctx, "app", "/v1/apps", &res); err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tNAME\tSTATUS\tTIER\tKEYS\tAPIS\tREVISION")
		for _, v := range res.Items {
			tier := "production"
			if v.Sandbox {
				tier = "sandbox"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%d\n", v.ID, v.Name, v.Status, tier, v.Keys, strings.Join(v.APIs, ","), v.Revision)
		}
		return tw.Flush()
	case "get":
		method = http.MethodGet
	case "create":
		in := struct {
			*registry.App
			WithSecret bool `json:"signing_secret"`
		}{app, withHMAC}
		body, _ = json.Marshal(in)
		method, at, want = http.MethodPost, "/v1/apps", http.StatusCreated
	case "rotate-key", "rotate-secret":
		method, at = http.MethodPost, path+"/"+pos[0]
	case "disable", "enable":
		status := map[string]string{"disable": registry.AppDisabled, "enable": registry.AppActive}[pos[0]]
		body, _ = json.Marshal(map[string]string{"status": status})
		method, at = http.MethodPut, path+"/status"
	case "grant":
		body, _ = json.Marshal(map[string]string{"api": pos[2]})
		method, at = http.MethodPost, path+"/grants"
	case "revoke":
		method, at = http.MethodDelete, path+"/grants/"+url.PathEscape(pos[2])
	default:
		return fmt.Errorf("%w: jetway app %s has no --admin-url form yet (it goes over NATS)", errUsage, pos[0])
	}
	if at == "" {
		at = path
	}
	a, err := c.call(ctx, method, at, body)
	if err != nil {
		return err
	}
	if a.status != want {
		if pos[0] == "create" && a.status == http.StatusConflict {
			return fmt.Errorf("app %s exists already (rotate-key gives it a new key)", id)
		}
		return restError("app", id, 0, a)
	}
	var v admin.AppView
	if err := decode(a, &v); err != nil {
		return err
	}
	switch pos[0] {
	case "get":
		issuer := "-"
		if v.JWTIssuer != "" {
			issuer = v.JWTIssuer
		}
		fmt.Fprintf(stdout, "id:       %s\nname:     %s\nstatus:   %s\ncalls:    %s\napis:     %s\nip_allow: %s\nsigning:  %d secret(s)\nissuer:   %s\ncerts:    %s\nrevision: %d\nkeys:     %d\n",
			v.ID, v.Name, v.Status, tierName(v.Sandbox), strings.Join(v.APIs, ", "), strings.Join(v.IPAllow, ", "), v.SigningSecrets, issuer, strings.Join(v.CertNames, ", "), v.Revision, v.Keys)
	case "create":
		fmt.Fprintf(stdout, "created app %s (revision %d)\nAPI key (shown once, store it now): %s\n", v.ID, v.Revision, v.Key)
		if withHMAC {
			fmt.Fprintf(stdout, "signing secret (shown once, store it now): %s\n", v.SigningSecret)
		}
	case "rotate-key":
		fmt.Fprintf(stdout, "new key for app %s; the old ones no longer work (revision %d)\nAPI key (shown once, store it now): %s\n", v.ID, v.Revision, v.Key)
	case "rotate-secret":
		fmt.Fprintf(stdout, "new signing secret for app %s; the old ones no longer verify (revision %d)\nsigning secret (shown once, store it now): %s\n", v.ID, v.Revision, v.SigningSecret)
	case "disable", "enable":
		fmt.Fprintf(stdout, "app %s is %s\n", v.ID, v.Status)
	case "grant", "revoke":
		fmt.Fprintf(stdout, "app %s may call %s\n", v.ID, orNone(v.APIs))
	}
	return nil
}
