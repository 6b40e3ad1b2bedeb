package edge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/push"
	"github.com/jetway-gw/jetway/registry"
)

// BuiltinPrefix starts every path the edge serves itself; no API may be
// routed under it (registry refuses such routes).
const BuiltinPrefix = registry.BuiltinPrefix

// topicRoute is what a push request of one topic needs; built once per
// snapshot.
type topicRoute struct {
	topic *registry.Topic
	auth  *AuthPolicy
}

// compileTopics builds the topics' routes: each authenticates apps by the
// topic's methods (an app's own JWT issuer for jwt) and checks no API
// grant (a topic has its own, push.go).
func compileTopics(s *registry.Snapshot, apps *appIndex) map[string]*topicRoute {
	out := make(map[string]*topicRoute, len(s.Topics))
	no := false
	for name, t := range s.Topics {
		api := &registry.API{Name: "topic " + name, Auth: &registry.Auth{Methods: t.Methods(), GrantedOnly: &no}}
		out[name] = &topicRoute{topic: t, auth: &AuthPolicy{api: api, apps: apps}}
	}
	return out
}

// validDevice admits a device id given at connect.
var validDevice = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// servePush serves /_jetway/{publish,sse,ws,pull,ack}/<topic>, and over the push
// TCP listener /_jetway/tcp/<topic> (w is then its *tcpHandshake). canon
// is the request's canonical escaped path, sent the path as the caller
// sent it.
func (e *Edge) servePush(w http.ResponseWriter, r *http.Request, id, canon, sent string, addr netip.Addr) {
	verb, name, _ := strings.Cut(strings.TrimPrefix(canon, BuiltinPrefix), "/")
	method := http.MethodGet
	batch := false
	tcp, overTCP := w.(*tcpHandshake)
	switch {
	case verb == "publish":
		method = http.MethodPost
		name, batch = strings.CutSuffix(name, "/batch")
	case verb == "ack":
		method = http.MethodPost
	case verb == "sse", verb == "ws", verb == "pull", verb == "receipts", verb == "tcp" && overTCP:
	default:
		writeError(w, bus.CodeRouteNotFound, "no built-in endpoint at "+canon, id)
		return
	}
	if e.o.Push == nil {
		writeError(w, bus.CodeRouteNotFound, "push is not served by this edge", id)
		return
	}
	if r.Method != method {
		w.Header().Set("Allow", method)
		writeError(w, bus.CodeMethodNotAllowed, canon+" takes "+method, id)
		return
	}
	tr := e.router.Load().topics[name]
	if tr == nil {
		writeError(w, bus.CodeTopicNotFound, "no topic "+quoteName(name), id)
		return
	}
	t := tr.topic
	if !t.AllowsOrigin(r.Header.Get("Origin")) {
		writeError(w, bus.CodeForbidden, "origin not allowed for topic "+t.Name, id)
		return
	}
	if verb == "ws" {
		if err := subprotocolCredentials(r); err != nil {
			writeError(w, bus.CodeBadRequest, err.Error(), id)
			return
		}
	}
	publish := verb == "publish"
	if method == http.MethodPost {
		// A publish or an ack is a call like an API's: it counts against
		// the edge's in-flight cap before its body is read (a
		// subscription, long-lived, does not count; a pull is admitted
		// as a connection).
		n := e.inflight.Add(1)
		defer e.inflight.Add(-1)
		if limit := e.o.MaxInFlight; limit > 0 && n > limit {
			writeError(w, bus.CodeOverloaded, fmt.Sprintf("this edge is serving %d requests, its limit", limit), id)
			return
		}
	}
	keyDigest, bearer := "", "" // a key's connection ends when the key is revoked
	switch tr.auth.method(r) {
	case "key":
		keyDigest = registry.KeyDigest(apiKey(r.Header.Clone()))
	case "jwt":
		bearer, _ = CutAuthScheme(r.Header.Get("Authorization"), "Bearer")
	}
	// The body is read after the caller is known, except for a signed
	// request, whose signature covers the body's digest: a stranger
	// never makes the edge read megabytes.
	var app *registry.App
	var err error
	signed := tr.auth.signed(r)
	if !signed {
		if app, err = Authenticate(r, tr.auth, Caller{Addr: addr, Path: sent}); err != nil {
			writeRefusal(w, asError(err), id)
			return
		}
	}
	var body []byte
	if method == http.MethodPost {
		limit, tooLarge := int64(registry.MaxPushMessage), push.ErrTooLarge.Error()
		switch {
		case batch:
			limit, tooLarge = maxBatchBody, fmt.Sprintf("a batch is at most %d bytes", maxBatchBody)
		case verb == "ack":
			limit, tooLarge = maxAckBody, fmt.Sprintf("an ack is at most %d bytes", maxAckBody)
		}
		if body, err = io.ReadAll(http.MaxBytesReader(w, r.Body, limit)); err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				writeError(w, bus.CodePayloadTooLarge, tooLarge, id)
				return
			}
			writeError(w, bus.CodeBadRequest, "reading the body: "+err.Error(), id)
			return
		}
	}
	if signed {
		if app, err = Authenticate(r, tr.auth, Caller{Addr: addr, Path: sent, Body: body}); err != nil {
			writeRefusal(w, asError(err), id)
			return
		}
	}
	if why := mayUse(t, app, publish || verb == "receipts"); why != "" {
		writeError(w, bus.CodeForbidden, why, id)
		return
	}
	if verb == "receipts" {
		e.receipts(w, r, id, t, app)
		return
	}
	if publish {
		if batch {
			e.publishBatch(w, r, id, t, app, body)
		} else {
			e.publish(w, r, id, t, app, body)
		}
		return
	}
	q := r.URL.Query()
	sub := push.Subscriber{Topic: t, App: app.ID, Device: q.Get("device"), Transport: verb}
	if bearer != "" {
		// Authenticate has verified this very token: its user claim (the
		// topic's; sub by default) is the user messages to=user reach,
		// its expiry the connection's end.
		sub.User, sub.Expires = tokenSubject(strings.TrimSpace(bearer), t.UserClaimOrDefault())
		sub.Token = true
		if !sub.Expires.IsZero() && !sub.Expires.After(time.Now()) {
			// Within the verifier's leeway: enough for a call, not for
			// a connection that would end at once.
			writeRefusal(w, unauthenticated("the token has expired"), id)
			return
		}
	}
	if sub.Device != "" && !validDevice.MatchString(sub.Device) {
		writeError(w, bus.CodeBadRequest, "device is 1 to 64 letters, digits, '_' and '-'", id)
		return
	}
	if sub.Group, sub.Prefetch, err = groupParams(q, verb, t); err != nil {
		writeError(w, bus.CodeBadRequest, err.Error(), id)
		return
	}
	if sub.Group != "" && sub.Token {
		// A group is an app's back end; a token of its issuer is one of
		// its users, who must not take (or ack away) the back end's work.
		writeError(w, bus.CodeForbidden, "a group is consumed with the app's key or signature, not a user's token", id)
		return
	}
	if verb == "ack" {
		if sub.Group != "" {
			e.ackGroup(w, r, id, sub, body)
			return
		}
		e.ack(w, r, id, sub, body)
		return
	}
	if sub.Start, err = startOf(r); err != nil {
		writeError(w, bus.CodeBadRequest, err.Error(), id)
		return
	}
	var pullMax int
	var pullWait time.Duration
	if verb == "pull" {
		if pullMax, pullWait, err = pullParams(q); err != nil {
			writeError(w, bus.CodeBadRequest, err.Error(), id)
			return
		}
		if sub.Start == (push.Start{}) { // a pull goes on from the ack by default
			sub.Start.Acked = true
		}
	}
	appID, store, group, userClaim := app.ID, t.Store(), sub.Group, t.UserClaimOrDefault()
	// The token the connection stands on: the one it came with, then
	// each fresh one its client sends over it.
	var token atomic.Pointer[string]
	if bearer != "" {
		tok := strings.TrimSpace(bearer)
		token.Store(&tok)
		user := sub.User
		sub.Refresh = func(fresh string) (time.Time, error) {
			fresh = strings.TrimSpace(fresh)
			if why := e.tokenStands(name, fresh, appID); why != "" {
				return time.Time{}, errors.New(why)
			}
			u, exp := tokenSubject(fresh, userClaim)
			switch {
			case u != user:
				return time.Time{}, fmt.Errorf("the token is of another user (%s, the connection's is %s)", quoteName(u), quoteName(user))
			case !exp.IsZero() && !exp.After(time.Now()):
				return time.Time{}, errors.New("the token has expired")
			}
			token.Store(&fresh)
			return exp, nil
		}
	}
	sub.Check = func(s *registry.Snapshot) string {
		t := s.Topics[name]
		if t == nil {
			return "topic " + name + " was deleted"
		}
		if t.Store() != store {
			return "topic " + name + " changed its mode; reconnect"
		}
		if group != "" && !t.HasGroup(group) {
			return "topic " + name + " no longer has group " + group
		}
		if token.Load() != nil && t.UserClaimOrDefault() != userClaim {
			return "topic " + name + " names its users by another claim now; reconnect"
		}
		a := s.Apps[appID]
		if a == nil || a.Status != registry.AppActive {
			return "app " + appID + " is disabled"
		}
		if keyDigest != "" && !hasKey(a, keyDigest) {
			return "the app's key was revoked"
		}
		if tok := token.Load(); tok != nil {
			if why := e.tokenStands(name, *tok, appID); why != "" {
				return why
			}
		}
		return mayUse(t, a, false)
	}
	release, refused := e.o.Push.Admit(app.ID, addr)
	if refused != nil {
		code := bus.CodeRateLimited
		if refused.Overloaded {
			code = bus.CodeOverloaded
		}
		writeRefusal(w, &Error{Code: code, Message: refused.Message, RetryAfter: retryAfterSecs(refused.RetryAfter)}, id)
		return
	}
	sub.Release = release
	ss, err := e.o.Push.Open(r.Context(), sub)
	if err != nil {
		release()
		code := bus.CodeBusUnavailable
		if errors.Is(err, push.ErrBadGroup) { // the topic changed under the request
			code = bus.CodeBadRequest
		}
		writeError(w, code, "push: "+err.Error(), id)
		return
	}
	switch verb {
	case "sse":
		e.o.Push.ServeSSE(w, r, ss)
	case "pull":
		e.pull(w, r, id, ss, pullMax, pullWait)
	case "ws":
		upgradeConn(w, r)
		e.o.Push.ServeWS(w, r, ss)
	default:
		tcp.taken = true
		e.o.Push.ServeTCP(tcp.conn, ss)
	}
}

// subprotocolCredentials takes a browser's credentials from the WebSocket
// subprotocols it offers (a browser cannot set headers on a WebSocket, and
// a URL is logged): "jetway.key.<api key>" or "jetway.bearer.<token>",
// offered with "jetway.v1", the one the edge selects. They become the
// request's X-Api-Key or Authorization header, as if sent so, and leave
// the subprotocol list.
func subprotocolCredentials(r *http.Request) error {
	offered := r.Header.Values("Sec-WebSocket-Protocol")
	if len(offered) == 0 {
		return nil
	}
	var kept []string
	found, v1 := false, false
	for _, line := range offered {
		for _, p := range strings.Split(line, ",") {
			p = strings.TrimSpace(p)
			switch {
			case strings.HasPrefix(p, push.SubprotocolKey):
				r.Header.Set("X-Api-Key", strings.TrimPrefix(p, push.SubprotocolKey))
				found = true
			case strings.HasPrefix(p, push.SubprotocolBearer):
				r.Header.Set("Authorization", "Bearer "+strings.TrimPrefix(p, push.SubprotocolBearer))
				found = true
			case p == push.Subprotocol:
				v1 = true
				kept = append(kept, p)
			case p != "":
				kept = append(kept, p)
			}
		}
	}
	if found && !v1 {
		return errors.New("credentials in a WebSocket subprotocol come with the subprotocol " + push.Subprotocol + ", which the edge selects")
	}
	if len(kept) == 0 {
		r.Header.Del("Sec-Websocket-Protocol")
	} else {
		r.Header["Sec-Websocket-Protocol"] = []string{strings.Join(kept, ", ")}
	}
	return nil
}

// mayUse says why an app may not publish to (or subscribe to) a topic;
// "" when it may.
func mayUse(t *registry.Topic, a *registry.App, publish bool) string {
	switch {
	case t.Sandbox && !a.Sandbox:
		return "topic " + t.Name + " is for sandbox apps"
	case !t.Sandbox && a.Sandbox:
		return "topic " + t.Name + " is for production apps; app " + a.ID + " is a sandbox app"
	case publish && !t.MayPublish(a.ID):
		return "app " + a.ID + " may not publish to topic " + t.Name
	case !publish && !t.MaySubscribe(a.ID):
		return "app " + a.ID + " may not subscribe to topic " + t.Name
	}
	return ""
}

func hasKey(a *registry.App, digest string) bool {
	for _, k := range a.Keys {
		if k.SHA256 == digest {
			return true
		}
	}
	return false
}

// startOf reads where a subscription starts: after=CURSOR or
// Last-Event-ID (the last message the client has), after=ack (the last
// it acked), or from=CURSOR (the first it wants); none: live messages
// only.
func startOf(r *http.Request) (push.Start, error) {
	q := r.URL.Query()
	after, from := q.Get("after"), q.Get("from")
	if lei := r.Header.Get("Last-Event-ID"); lei != "" && (after == "" || after == "ack") {
		// A browser's EventSource reconnects to the same URL with the
		// last id it got: newer than any ack it sent.
		after = lei
	}
	var st push.Start
	if after != "" && from != "" {
		return st, errors.New("give after (or Last-Event-ID) or from, not both")
	}
	if after == "ack" {
		st.Acked = true
		return st, nil
	}
	for _, c := range []struct {
		text string
		dst  **push.Cursor
	}{{after, &st.After}, {from, &st.From}} {
		if c.text == "" {
			continue
		}
		cur, err := push.ParseCursor(c.text)
		if err != nil {
			return st, err
		}
		*c.dst = &cur
	}
	return st, nil
}

// publish stores one message: the body is its data; to=app|device with
// app= (and device=) address it; key= names the value a latest_only topic
// keeps; Idempotency-Key makes a retry store it once.
func (e *Edge) publish(w http.ResponseWriter, r *http.Request, id string, t *registry.Topic, app *registry.App, body []byte) {
	q := r.URL.Query()
	addr, ok := addressID(q.Get("to"), q.Get("device"), q.Get("user"))
	if !ok {
		writeError(w, bus.CodeBadRequest, errAddress, id)
		return
	}
	m := push.Message{To: q.Get("to"), App: q.Get("app"), ID: addr, Key: q.Get("key"), Data: body,
		IdempotencyKey: r.Header.Get("Idempotency-Key"), Receipt: q.Get("receipt") == "1"}
	if len(m.IdempotencyKey) > 256 {
		writeError(w, bus.CodeBadRequest, "Idempotency-Key is at most 256 bytes", id)
		return
	}
	out, err := e.o.Push.Publish(r.Context(), t, app.ID, m)
	switch {
	case errors.Is(err, push.ErrTooLarge):
		writeError(w, bus.CodePayloadTooLarge, err.Error(), id)
		return
	case err != nil && !push.Unavailable(err):
		writeError(w, bus.CodeBadRequest, err.Error(), id)
		return
	case err != nil:
		writeError(w, bus.CodeBusUnavailable, "push: "+err.Error(), id)
		return
	}
	status := http.StatusOK
	if !out.Stored {
		status = http.StatusAccepted
	}
	_ = writeJSON(w, status, out)
}

// writeJSON answers with v as JSON (no HTML escaping: a message of '<'
// stays one byte, not six).
func writeJSON(w http.ResponseWriter, status int, v any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, err := w.Write(b.Bytes())
	return err
}

// maxBatchBody bounds a batch publish's body.
const maxBatchBody = 8 << 20

// batchBody is a batch publish: messages as publish takes them, the data
// a JSON string.
type batchBody struct {
	Messages []struct {
		Data           string `json:"data"`
		To             string `json:"to"`
		App            string `json:"app"`
		Device         string `json:"device"`
		User           string `json:"user"`
		Key            string `json:"key"`
		IdempotencyKey string `json:"idempotency_key"`
		Receipt        bool   `json:"receipt"`
	} `json:"messages"`
}

// publishBatch stores up to push.MaxBatch messages of a topic in one
// request, in their order, and answers for each: {"topic":…,"results":[…]}
// with each message's sequence and cursor, or its error. A message that
// is not valid does not keep the others from being stored.
func (e *Edge) publishBatch(w http.ResponseWriter, r *http.Request, id string, t *registry.Topic, app *registry.App, body []byte) {
	var b batchBody
	if !decodeStrict(body, &b) {
		writeError(w, bus.CodeBadRequest, `a batch is {"messages":[{"data":"...","to":"app","app":"...","device":"...","key":"...","idempotency_key":"..."}]}`, id)
		return
	}
	if len(b.Messages) == 0 || len(b.Messages) > push.MaxBatch {
		writeError(w, bus.CodeBadRequest, fmt.Sprintf("a batch holds 1 to %d messages, not %d", push.MaxBatch, len(b.Messages)), id)
		return
	}
	ms := make([]push.Message, len(b.Messages))
	for i, m := range b.Messages {
		if len(m.IdempotencyKey) > 256 {
			writeError(w, bus.CodeBadRequest, fmt.Sprintf("messages[%d].idempotency_key is at most 256 bytes", i), id)
			return
		}
		addr, ok := addressID(m.To, m.Device, m.User)
		if !ok {
			writeError(w, bus.CodeBadRequest, fmt.Sprintf("messages[%d]: %s", i, errAddress), id)
			return
		}
		ms[i] = push.Message{To: m.To, App: m.App, ID: addr, Key: m.Key, Data: []byte(m.Data), IdempotencyKey: m.IdempotencyKey, Receipt: m.Receipt}
	}
	items, err := e.o.Push.PublishBatch(r.Context(), t, app.ID, ms)
	if err != nil {
		writeError(w, bus.CodeBadRequest, err.Error(), id)
		return
	}
	// Every message refused by the stream or the bus, none by itself
	// and none of unknown outcome: the batch is the bus's failure, and
	// may be retried whole.
	down := true
	for _, it := range items {
		if it.Stored || it.Bad || it.Unknown || it.Error == "" {
			down = false
			break
		}
	}
	if down {
		writeError(w, bus.CodeBusUnavailable, "push: "+items[0].Error, id)
		return
	}
	_ = writeJSON(w, http.StatusOK, struct {
		Topic   string           `json:"topic"`
		Results []push.BatchItem `json:"results"`
	}{t.Name, items})
}

// addressID is the id a message's address needs: the device's for
// to=device, the user's for to=user. ok is false when one is given where
// it does not belong: refused, never ignored.
func addressID(to, device, user string) (id string, ok bool) {
	switch {
	case to == "user" && device == "":
		return user, true
	case to != "user" && user == "":
		return device, true
	}
	return "", false
}

// errAddress is the refusal of an id given where it does not belong.
const errAddress = "device= goes with to=device, user= with to=user"

// quoteName quotes a name from a path for a message, bounded.
func quoteName(s string) string {
	if len(s) > 130 {
		s = s[:130] + "…"
	}
	b, _ := json.Marshal(s)
	return string(b)
}

// tokenStands says why a connection's token no longer admits it under the
// edge's routes now in force ("" : it does): the app's issuer removed or
// changed, its keys no longer verifying it, or the token naming another
// app. A registry change reaches token connections as it does key ones.
func (e *Edge) tokenStands(topic, token, app string) string {
	tr := e.router.Load().topics[topic]
	if tr == nil {
		return "topic " + topic + " was deleted"
	}
	req := &http.Request{Header: http.Header{"Authorization": {"Bearer " + token}}}
	aa, err := tr.auth.identifyBy("jwt", req, Caller{})
	if err != nil {
		return "the token is no longer accepted: " + err.Error()
	}
	if aa.app.ID != app {
		return "the token names another app now"
	}
	return ""
}

// tokenSubject reads the user (its claim userClaim: the topic's) and the
// expiry of a token Authenticate has verified (so it is not verified
// again). A claim that is not a string, or longer than 256 bytes, is no
// user.
func tokenSubject(token, userClaim string) (user string, expires time.Time) {
	claims := jwt.MapClaims{}
	if _, _, err := jwt.NewParser().ParseUnverified(token, claims); err != nil {
		return "", time.Time{}
	}
	if u, ok := claims[userClaim].(string); ok && len(u) <= 256 {
		user = u
	}
	if exp, err := claims.GetExpirationTime(); err == nil && exp != nil {
		expires = exp.Time
	}
	return user, expires
}

// maxAckBody bounds an ack's body: a cursor, or a group's receipts.
const maxAckBody = 128 << 10

// ack stores a subscriber's ack: the body is {"cursor":"E:S"}, the
// subscriber the app with device= or the token's user, as a connection
// would be. The answer is the ack stored now, {"topic":…,"acked":"E:S"}:
// the one sent, or a later one already stored.
func (e *Edge) ack(w http.ResponseWriter, r *http.Request, id string, sub push.Subscriber, body []byte) {
	var b struct {
		Cursor string `json:"cursor"`
	}
	if !decodeStrict(body, &b) || b.Cursor == "" {
		writeError(w, bus.CodeBadRequest, `an ack is {"cursor":"EPOCH:SEQ"}: the cursor of the last message handled`, id)
		return
	}
	at, err := push.ParseCursor(b.Cursor)
	if err != nil {
		writeError(w, bus.CodeBadRequest, err.Error(), id)
		return
	}
	stored, err := e.o.Push.Ack(r.Context(), sub, at)
	var bad *push.BadAck
	switch {
	case errors.As(err, &bad):
		writeError(w, bus.CodeBadRequest, "ack: "+err.Error(), id)
		return
	case err != nil:
		writeError(w, bus.CodeBusUnavailable, "push: "+err.Error(), id)
		return
	}
	_ = writeJSON(w, http.StatusOK, struct {
		Topic string `json:"topic"`
		Acked string `json:"acked"`
	}{sub.Topic.Name, stored.String()})
}

// pullParams reads a pull's max= (messages, 1 to push.MaxPullMessages;
// default push.DefaultPullMessages) and wait= (how long to wait for the
// first, a duration up to push.MaxPullWait; default 0: answer at once).
func pullParams(q url.Values) (max int, wait time.Duration, err error) {
	max = push.DefaultPullMessages
	if s := q.Get("max"); s != "" {
		if max, err = strconv.Atoi(s); err != nil || max < 1 || max > push.MaxPullMessages {
			return 0, 0, fmt.Errorf("max is 1 to %d messages", push.MaxPullMessages)
		}
	}
	if s := q.Get("wait"); s != "" {
		if wait, err = time.ParseDuration(s); err != nil || wait < 0 || wait > push.MaxPullWait {
			return 0, 0, fmt.Errorf("wait is a duration (30s) up to %s", push.MaxPullWait)
		}
	}
	return max, wait, nil
}

// pull answers one pull: the messages, or why there are none (503 when
// the edge is shutting down, 403 when the subscription was revoked while
// it waited).
func (e *Edge) pull(w http.ResponseWriter, r *http.Request, id string, ss *push.Session, max int, wait time.Duration) {
	// The request is read: a read deadline must not end the wait; the
	// answer's write has its own, so a client that never reads does not
	// keep the pull (and its admission) forever.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	e.o.Push.Pull(r.Context(), ss, max, wait, func(p *push.Pulled, err error) error {
		_ = rc.SetWriteDeadline(time.Now().Add(e.o.Push.WriteTimeout()))
		var ended *push.Ended
		switch {
		case errors.As(err, &ended) && ended.Shutdown:
			writeRefusal(w, &Error{Code: bus.CodeOverloaded, Message: ended.Reason, RetryAfter: 1}, id)
		case errors.As(err, &ended) && ended.Expired:
			writeRefusal(w, unauthenticated(ended.Reason), id)
		case errors.As(err, &ended):
			writeError(w, bus.CodeForbidden, ended.Reason, id)
		case errors.Is(err, context.Canceled):
			// The client left: nothing to answer.
		case err != nil:
			writeError(w, bus.CodeBusUnavailable, "push: "+err.Error(), id)
		default:
			if err := writeJSON(w, http.StatusOK, p); err != nil {
				return err
			}
			return rc.Flush() // written, or the messages go back (a group's)
		}
		return nil
	})
}

// groupParams reads a group subscription's group= and prefetch= (how many
// unacked messages the connection holds, 1 to push.MaxPrefetch). A group
// is one the topic lists, over a transport that acks on its connection
// (ws, tcp) or by receipt (pull, ack): not SSE.
func groupParams(q url.Values, verb string, t *registry.Topic) (group string, prefetch int, err error) {
	group = q.Get("group")
	if s := q.Get("prefetch"); s != "" {
		if group == "" {
			return "", 0, errors.New("prefetch= goes with group=")
		}
		if prefetch, err = strconv.Atoi(s); err != nil || prefetch < 1 || prefetch > push.MaxPrefetch {
			return "", 0, fmt.Errorf("prefetch is 1 to %d messages", push.MaxPrefetch)
		}
	}
	switch {
	case group == "":
		return "", 0, nil
	case !validDevice.MatchString(group):
		return "", 0, errors.New("group is 1 to 64 letters, digits, '_' and '-'")
	case !t.HasGroup(group):
		return "", 0, fmt.Errorf("topic %s has no group %q (its groups.names)", t.Name, group)
	case verb == "sse":
		return "", 0, errors.New("a group's messages are acked one by one: subscribe over ws, tcp or pull, not sse")
	case q.Get("after") != "" || q.Get("from") != "" || q.Get("device") != "":
		return "", 0, errors.New("a group starts where the group is: no after=, from= or device=")
	}
	return group, prefetch, nil
}

// ackGroup acks and nacks a group's messages by their receipts: the body
// is {"ack":["receipt",…],"nack":[…],"delay":"10s"}; the answer says how
// many of each were sent.
func (e *Edge) ackGroup(w http.ResponseWriter, r *http.Request, id string, sub push.Subscriber, body []byte) {
	var a push.GroupAcks
	if !decodeStrict(body, &a) {
		writeError(w, bus.CodeBadRequest, `a group's ack is {"ack":["receipt",...],"nack":["receipt",...],"delay":"10s"}`, id)
		return
	}
	acked, nacked, err := e.o.Push.AckGroup(r.Context(), sub, a)
	switch {
	case errors.Is(err, push.ErrBadReceipt), errors.Is(err, push.ErrBadGroup):
		writeError(w, bus.CodeBadRequest, err.Error(), id)
		return
	case err != nil:
		writeError(w, bus.CodeBusUnavailable, "push: "+err.Error(), id)
		return
	}
	_ = writeJSON(w, http.StatusOK, struct {
		Topic  string `json:"topic"`
		Group  string `json:"group"`
		Acked  int    `json:"acked"`
		Nacked int    `json:"nacked"`
	}{sub.Topic.Name, sub.Group, acked, nacked})
}

// decodeStrict decodes a push request's JSON body into v: one object, no
// field v does not have.
func decodeStrict(body []byte, v any) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	return dec.Decode(v) == nil && !dec.More()
}

// receipts answers GET /_jetway/receipts/<topic>?seq=N: the delivery
// receipts of message N, published by the caller with receipt=1 —
// {"topic":…,"seq":N,"receipts":[{"app","device","user","transport","at"}]}.
func (e *Edge) receipts(w http.ResponseWriter, r *http.Request, id string, t *registry.Topic, app *registry.App) {
	seq, err := strconv.ParseUint(r.URL.Query().Get("seq"), 10, 64)
	if err != nil || seq == 0 {
		writeError(w, bus.CodeBadRequest, "seq= is the sequence of a message published with receipt=1", id)
		return
	}
	rs, err := e.o.Push.Receipts(r.Context(), t, app.ID, seq)
	if err != nil {
		writeError(w, bus.CodeBusUnavailable, "push: "+err.Error(), id)
		return
	}
	_ = writeJSON(w, http.StatusOK, struct {
		Topic    string         `json:"topic"`
		Seq      uint64         `json:"seq"`
		Receipts []push.Receipt `json:"receipts"`
	}{t.Name, seq, rs})
}
