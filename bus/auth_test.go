package bus

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus/natstest"
)

// roleConn is a connection as one role's user that records the server's
// permission violations.
type roleConn struct {
	*nats.Conn
	errs chan error
}

func connectAs(t *testing.T, s *server.Server, user, pass string) *roleConn {
	t.Helper()
	rc := &roleConn{errs: make(chan error, 64)}
	role := user
	var pools []string
	if pool, ok := strings.CutPrefix(user, UserWorker+"-"); ok {
		role, pools = UserWorker, []string{pool} // worker-<pool>: a user of one pool
	}
	opts := []nats.Option{nats.UserInfo(user, pass),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { rc.errs <- err })}
	if p := InboxPrefix(role, pools...); p != "" {
		opts = append(opts, nats.CustomInboxPrefix(p))
	}
	rc.Conn = natstest.Connect(t, s, opts...)
	return rc
}

// denied runs f and waits for the server's permissions violation naming
// subject.
func (rc *roleConn) denied(t *testing.T, what, subject string, f func()) {
	t.Helper()
	f()
	_ = rc.FlushTimeout(2 * time.Second)
	timeout := time.After(2 * time.Second)
	for {
		select {
		case err := <-rc.errs:
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+subject+`"`) {
				return
			}
		case <-timeout:
			t.Fatalf("%s: no permissions violation for %q", what, subject)
		}
	}
}

// allowed checks that no violation was reported so far.
func (rc *roleConn) allowed(t *testing.T, what string) {
	t.Helper()
	_ = rc.FlushTimeout(2 * time.Second)
	select {
	case err := <-rc.errs:
		t.Fatalf("%s: %v", what, err)
	default:
	}
}

// roleServer runs a server with the roles' users (passwords a, e, w), a
// worker user of pool orders (worker-orders, wo) and one of pool other
// (worker-<other>, we).
func roleServer(t *testing.T, other string) *server.Server {
	t.Helper()
	creds := Credentials{UserAdmin: "a", UserEdge: "e", UserWorker: "w"}
	opts := natstest.DefaultOptions(t)
	opts.Users = append(creds.users(),
		&server.User{Username: "worker-orders", Password: "wo", Permissions: RolePermissions(UserWorker, "orders")},
		&server.User{Username: UserWorker + "-" + other, Password: "we", Permissions: RolePermissions(UserWorker, other)})
	return natstest.RunServerWithOptions(t, opts)
}

// The roles' users on a real server: each may do what its role needs and
// the server refuses the rest — above all, no edge and no worker of another
// pool may publish a pool's breaker events, and no worker may read the apps
// (they hold the HMAC signing secrets).
func TestRolePermissionsOnServer(t *testing.T) {
	s := roleServer(t, "eu")
	admin := connectAs(t, s, UserAdmin, "a")
	ajs, _ := jetstream.New(admin.Conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kvs := map[string]jetstream.KeyValue{}
	for _, b := range []string{BucketAPIs, BucketFlags, BucketApps, BucketAlerts, BucketNonces, BucketCache, BucketPushAcks} {
		kv, err := ajs.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: b})
		if err != nil {
			t.Fatal(err)
		}
		kvs[b] = kv
	}
	if _, err := kvs[BucketApps].Put(ctx, "shop", []byte(`{"signing_secret":"s3cret"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := kvs[BucketAPIs].Put(ctx, "orders.get", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	heard := make(chan string, 16) // breaker events the admin hears
	if _, err := admin.Subscribe(BreakerPrefix+">", func(m *nats.Msg) { heard <- m.Subject }); err != nil {
		t.Fatal(err)
	}
	admin.Flush()

	edge := connectAs(t, s, UserEdge, "e")
	orders := connectAs(t, s, "worker-orders", "wo")
	eu := connectAs(t, s, "worker-eu", "we")
	worker := connectAs(t, s, UserWorker, "w") // every pool, as on the embedded server

	forged := []byte(`{"api":"orders.get","to":"open","open_until":"2999-01-01T00:00:00Z","gen":99999}`)
	subj := BreakerSubject("orders", "orders.get")
	edge.denied(t, "edge publishes a breaker event", subj, func() { _ = edge.Publish(subj, forged) })
	eu.denied(t, "worker of pool eu publishes for pool orders", subj, func() { _ = eu.Publish(subj, forged) })
	// Pool "eu" cannot pass for a pool "eu.x" either: dots are no token boundary.
	dotted := BreakerSubject("eu.x", "a")
	if dotted != "jetway.breaker.eu:x.a" {
		t.Fatalf("BreakerSubject(eu.x, a) = %q", dotted)
	}
	eu.denied(t, "worker of pool eu publishes for pool eu.x", dotted, func() { _ = eu.Publish(dotted, forged) })
	if err := orders.Publish(subj, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	orders.allowed(t, "worker of pool orders publishes its breaker event")
	select {
	case got := <-heard:
		if got != subj {
			t.Fatalf("heard a breaker event on %s", got)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the pool's own breaker event did not arrive")
	}
	select {
	case got := <-heard:
		t.Fatalf("a forged breaker event got through on %s", got)
	case <-time.After(100 * time.Millisecond):
	}
	eu.denied(t, "worker of pool eu listens to pool orders' breakers", BreakerPrefix+"orders.>", func() {
		_, _ = eu.Subscribe(BreakerPrefix+"orders.>", func(*nats.Msg) {})
	})
	for _, c := range []*roleConn{edge, orders, eu} {
		c.denied(t, "heartbeat as another role", HeartbeatSubject("serve", "x"), func() { _ = c.Publish(HeartbeatSubject("serve", "x"), []byte(`{}`)) })
	}
	orders.denied(t, "worker publishes a rate-limit report", RateLimitSubject, func() { _ = orders.Publish(RateLimitSubject, []byte(`{}`)) })
	orders.denied(t, "worker publishes metrics", MetricsPrefix+"edge.x", func() { _ = orders.Publish(MetricsPrefix+"edge.x", []byte(`[]`)) })

	// Workers join only their pools' queue groups, and never listen to
	// every request.
	if _, err := orders.QueueSubscribe(APISubject("orders", "orders.get"), QueueGroup("orders"), func(m *nats.Msg) { _ = m.Respond([]byte("ok")) }); err != nil {
		t.Fatal(err)
	}
	orders.allowed(t, "worker of pool orders joins its queue group")
	eu.denied(t, "worker of pool eu joins pool orders' group", APISubject("orders", "orders.get"), func() {
		_, _ = eu.QueueSubscribe(APISubject("orders", "orders.get"), QueueGroup("orders"), func(*nats.Msg) {})
	})
	eu.denied(t, "worker listens to every request", APIPrefix+">", func() { _, _ = eu.Subscribe(APIPrefix+">", func(*nats.Msg) {}) })
	// Not even in its own queue group: the pool is in the subject, so a
	// worker of pool eu cannot take pool orders' calls (bodies, callers).
	eu.denied(t, "worker of pool eu takes pool orders' calls in its own group", APISubject("orders", "orders.get"), func() {
		_, _ = eu.QueueSubscribe(APISubject("orders", "orders.get"), QueueGroup("eu"), func(*nats.Msg) {})
	})
	// The edge calls; the worker may answer that call (and nothing else).
	if m, err := edge.Request(APISubject("orders", "orders.get"), nil, 2*time.Second); err != nil || string(m.Data) != "ok" {
		t.Fatalf("edge → worker → edge: %v %v", m, err)
	}
	orders.denied(t, "worker publishes on an inbox it was not asked on", InboxPrefixEdge+".x", func() { _ = orders.Publish(InboxPrefixEdge+".x", nil) })
	// A stream goes to the edge's stream inbox of the call, whose random
	// token is the capability; every other edge inbox stays closed, and a
	// request is still answered once (a worker cannot flood an edge's
	// request-reply inbox).
	if err := orders.Publish(StreamInboxPrefix+".0123456789abcdef0123456789abcdef", nil); err != nil {
		t.Fatal(err)
	}
	orders.allowed(t, "worker publishes to a stream inbox")
	orders.denied(t, "worker publishes below a stream inbox", StreamInboxPrefix+".a.b", func() { _ = orders.Publish(StreamInboxPrefix+".a.b", nil) })
	// Backend calls of type nats go under the service prefix, and nowhere
	// else: an entry cannot point a worker at the server's own subjects.
	if _, err := admin.Subscribe(ServicePrefix+"orders.get", func(m *nats.Msg) { _ = m.Respond([]byte("svc")) }); err != nil {
		t.Fatal(err)
	}
	admin.Flush()
	if m, err := orders.Request(ServicePrefix+"orders.get", nil, 2*time.Second); err != nil || string(m.Data) != "svc" {
		t.Fatalf("worker → NATS service: %v %v", m, err)
	}
	// The NATS services protocol: workers answer as Jetway's service,
	// never as another.
	for _, subj := range []string{"$SRV.PING", "$SRV.INFO." + ServiceName, "$SRV.STATS." + ServiceName + ".id1"} {
		if _, err := eu.Subscribe(subj, func(*nats.Msg) {}); err != nil {
			t.Fatal(err)
		}
		eu.allowed(t, "worker answers "+subj)
	}
	eu.denied(t, "worker answers as another service", "$SRV.INFO.orders-service", func() {
		_, _ = eu.Subscribe("$SRV.INFO.orders-service", func(*nats.Msg) {})
	})
	for _, subj := range []string{"$JS.API.STREAM.LIST", "$SYS.REQ.SERVER.PING", "orders.get"} {
		orders.denied(t, "worker calls a subject outside the service prefix", subj, func() { _ = orders.Publish(subj, nil) })
		edge.denied(t, "edge calls a NATS service", ServicePrefix+"orders.get", func() { _ = edge.Publish(ServicePrefix+"orders.get", nil) })
	}
	// A worker of one pool cannot overhear the answers to another pool's
	// workers (their fallback calls): each pool set has its own inbox.
	ordersInbox := InboxPrefix(UserWorker, "orders") + ".>"
	eu.denied(t, "worker of pool eu listens to pool orders' inbox", ordersInbox, func() { _, _ = eu.Subscribe(ordersInbox, func(*nats.Msg) {}) })
	eu.denied(t, "worker of pool eu listens to every worker's inbox", InboxPrefixWorker+".>", func() { _, _ = eu.Subscribe(InboxPrefixWorker+".>", func(*nats.Msg) {}) })
	if _, err := orders.Subscribe(ordersInbox, func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	orders.allowed(t, "worker of pool orders listens to its own inbox")

	// Nobody but the admin writes the registry; only edges claim nonces.
	edge.denied(t, "edge writes an api", "$KV."+BucketAPIs+".orders.get", func() { _ = edge.Publish("$KV."+BucketAPIs+".orders.get", []byte(`{}`)) })
	worker.denied(t, "worker claims a nonce", "$KV."+BucketNonces+".n1", func() { _ = worker.Publish("$KV."+BucketNonces+".n1", nil) })
	ejs, _ := jetstream.New(edge.Conn)
	nonces, err := ejs.KeyValue(ctx, BucketNonces)
	if err != nil {
		t.Fatalf("edge opens the nonce bucket: %v", err)
	}
	if _, err := nonces.Create(ctx, "n1", []byte("1")); err != nil {
		t.Fatalf("edge claims a nonce: %v", err)
	}
	// Edges keep push clients' acks (create, read, compare-and-set);
	// workers do not touch them.
	acks, err := ejs.KeyValue(ctx, BucketPushAcks)
	if err != nil {
		t.Fatalf("edge opens the ack bucket: %v", err)
	}
	rev, err := acks.Create(ctx, "orders.shop.d.d1", []byte("1:1"))
	if err != nil {
		t.Fatalf("edge stores an ack: %v", err)
	}
	if e, err := acks.Get(ctx, "orders.shop.d.d1"); err != nil || string(e.Value()) != "1:1" {
		t.Fatalf("edge reads an ack: %v %v", e, err)
	}
	if _, err := acks.Update(ctx, "orders.shop.d.d1", []byte("1:2"), rev); err != nil {
		t.Fatalf("edge moves an ack forward: %v", err)
	}
	if err := edge.Publish("$JS.ACK."+PushDurable.Stream+".g1.1.1.1.1.0", []byte("+ACK")); err != nil {
		t.Fatal(err)
	}
	edge.allowed(t, "edge acks a group's message")
	edge.denied(t, "edge acks a message of another stream", "$JS.ACK.KV_"+BucketApps+".c.1.1.1.1.0", func() { _ = edge.Publish("$JS.ACK.KV_"+BucketApps+".c.1.1.1.1.0", []byte("+ACK")) })
	worker.denied(t, "worker acks a group's message", "$JS.ACK."+PushDurable.Stream+".g1.1.1.1.1.0", func() { _ = worker.Publish("$JS.ACK."+PushDurable.Stream+".g1.1.1.1.1.0", []byte("+ACK")) })
	worker.denied(t, "worker writes an ack", "$KV."+BucketPushAcks+".orders.shop.a", func() { _ = worker.Publish("$KV."+BucketPushAcks+".orders.shop.a", []byte("1:9")) })
	// Edges exchange their push connection census and answer operators'
	// questions; only the admin asks (a kick ends connections on every
	// edge), and workers do neither.
	if _, err := edge.Subscribe(PushQuerySubject, func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	if _, err := edge.Subscribe(PushCensusSubject, func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	if err := edge.Publish(PushCensusSubject, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	edge.allowed(t, "edge follows and publishes the census, and hears operators' questions")
	edge.denied(t, "edge asks every edge to kick", PushQuerySubject, func() { _ = edge.Publish(PushQuerySubject, []byte(`{"op":"kick","app":"shop"}`)) })
	worker.denied(t, "worker publishes a census", PushCensusSubject, func() { _ = worker.Publish(PushCensusSubject, []byte(`{}`)) })
	worker.denied(t, "worker hears operators' questions", PushQuerySubject, func() { _, _ = worker.Subscribe(PushQuerySubject, func(*nats.Msg) {}) })
	// Edges keep answers in the shared cache and read them back; workers
	// do neither.
	if err := edge.Publish("$KV."+BucketCache+".a.p.b.c", []byte("answer")); err != nil {
		t.Fatal(err)
	}
	edge.allowed(t, "edge keeps a shared answer")
	cacheStream, err := ejs.Stream(ctx, "KV_"+BucketCache)
	if err != nil {
		t.Fatalf("edge opens the shared cache: %v", err)
	}
	natstest.CheckFor(t, 2*time.Second, 5*time.Millisecond, func() error { // the publish is not acknowledged
		if m, err := cacheStream.GetLastMsgForSubject(ctx, "$KV."+BucketCache+".a.p.b.c"); err != nil || string(m.Data) != "answer" {
			return fmt.Errorf("edge reads a shared answer: %v", err)
		}
		return nil
	})
	worker.denied(t, "worker writes the shared cache", "$KV."+BucketCache+".a.p.b.c", func() { _ = worker.Publish("$KV."+BucketCache+".a.p.b.c", nil) })
	// Only the admin writes (and reads) the audit trail.
	for _, c := range []*roleConn{edge, worker} {
		c.denied(t, "a node forges an audit record", AuditPrefix+"api", func() { _ = c.Publish(AuditPrefix+"api", []byte(`{}`)) })
	}

	// Edges read the apps; workers read the APIs but never the apps.
	apps, err := ejs.KeyValue(ctx, BucketApps)
	if err != nil {
		t.Fatalf("edge opens apps: %v", err)
	}
	if e, err := apps.Get(ctx, "shop"); err != nil || !strings.Contains(string(e.Value()), "s3cret") {
		t.Fatalf("edge reads an app: %v", err)
	}
	w, err := apps.Watch(ctx, "shop")
	if err != nil {
		t.Fatalf("edge watches apps: %v", err)
	}
	if e := <-w.Updates(); e == nil || e.Key() != "shop" {
		t.Fatalf("edge watch: %v", e)
	}
	_ = w.Stop()
	edge.allowed(t, "edge reads and watches apps")

	// Edges hear the nonce bucket deleted (they then refuse requests signed
	// before); workers do not.
	deleted := make(chan string, 1)
	if _, err := edge.Subscribe(NonceBucketDeleted, func(m *nats.Msg) { deleted <- m.Subject }); err != nil {
		t.Fatal(err)
	}
	edge.allowed(t, "edge hears the nonce bucket deleted")
	worker.denied(t, "worker hears the nonce bucket deleted", NonceBucketDeleted, func() { _, _ = worker.Subscribe(NonceBucketDeleted, func(*nats.Msg) {}) })
	if err := ajs.DeleteKeyValue(ctx, BucketNonces); err != nil {
		t.Fatal(err)
	}
	select {
	case <-deleted:
	case <-time.After(2 * time.Second):
		t.Fatal("edge: no advisory of the nonce bucket deleted")
	}

	// Edges hear cache purges and answer them; they may not send one (a
	// compromised edge would send every API's calls to its backend), nor
	// may workers hear them.
	if _, err := edge.Subscribe(CachePurgeSubject, func(m *nats.Msg) { _ = m.Respond([]byte(`{"purged":0}`)) }); err != nil {
		t.Fatal(err)
	}
	edge.allowed(t, "edge hears cache purges")
	if _, err := admin.Request(CachePurgeSubject, []byte(`{"api":"x"}`), 2*time.Second); err != nil {
		t.Fatalf("the admin's purge got no answer from the edge: %v", err)
	}
	edge.denied(t, "edge sends a cache purge", CachePurgeSubject, func() { _ = edge.Publish(CachePurgeSubject, []byte(`{"api":"x"}`)) })
	worker.denied(t, "worker hears cache purges", CachePurgeSubject, func() { _, _ = worker.Subscribe(CachePurgeSubject, func(*nats.Msg) {}) })

	for _, c := range []*roleConn{worker, orders} {
		js, _ := jetstream.New(c.Conn)
		apis, err := js.KeyValue(ctx, BucketAPIs)
		if err != nil {
			t.Fatalf("worker opens apis: %v", err)
		}
		if _, err := apis.Get(ctx, "orders.get"); err != nil {
			t.Fatalf("worker reads an api: %v", err)
		}
		aw, err := apis.WatchAll(ctx)
		if err != nil {
			t.Fatalf("worker watches apis: %v", err)
		}
		if e := <-aw.Updates(); e == nil || e.Key() != "orders.get" {
			t.Fatalf("worker watch: %v", e)
		}
		_ = aw.Stop()
		c.allowed(t, "worker reads and watches apis")

		short, cancelShort := context.WithTimeout(ctx, 500*time.Millisecond)
		c.denied(t, "worker opens apps", "$JS.API.STREAM.INFO.KV_"+BucketApps, func() { _, _ = js.KeyValue(short, BucketApps) })
		cancelShort()
		direct := "$JS.API.DIRECT.GET.KV_" + BucketApps + ".$KV." + BucketApps + ".shop"
		c.denied(t, "worker direct-gets an app", direct, func() { _ = c.PublishRequest(direct, c.NewInbox(), nil) })
		c.denied(t, "worker consumes apps", "$JS.API.CONSUMER.CREATE.KV_"+BucketApps, func() {
			_ = c.PublishRequest("$JS.API.CONSUMER.CREATE.KV_"+BucketApps, c.NewInbox(), []byte(`{}`))
		})
		c.denied(t, "worker listens to app writes", "$KV."+BucketApps+".>", func() { _, _ = c.Subscribe("$KV."+BucketApps+".>", func(*nats.Msg) {}) })
		// Nor the TLS certificates' private keys.
		certs := "$JS.API.DIRECT.GET.KV_" + BucketCerts + ".$KV." + BucketCerts + ".shop"
		c.denied(t, "worker direct-gets a certificate", certs, func() { _ = c.PublishRequest(certs, c.NewInbox(), nil) })
		c.denied(t, "worker consumes certificates", "$JS.API.CONSUMER.CREATE.KV_"+BucketCerts, func() {
			_ = c.PublishRequest("$JS.API.CONSUMER.CREATE.KV_"+BucketCerts, c.NewInbox(), []byte(`{}`))
		})
		// Replies and watch deliveries to edges (the apps included) go to
		// the edges' inbox, which workers may not hear.
		c.denied(t, "worker listens to the edges' inbox", InboxPrefixEdge+".>", func() { _, _ = c.Subscribe(InboxPrefixEdge+".>", func(*nats.Msg) {}) })
		c.denied(t, "worker listens to the default inbox", "_INBOX.>", func() { _, _ = c.Subscribe("_INBOX.>", func(*nats.Msg) {}) })
	}
}

// A pool's workers read their pool's backend secrets, one key at a time,
// and nothing else of the bucket: not another pool's, not the list of
// keys, not a watch; edges read none.
func TestSecretsAreEachPoolsOwn(t *testing.T) {
	s := roleServer(t, "eu.x")
	admin := connectAs(t, s, UserAdmin, "a")
	ajs, _ := jetstream.New(admin.Conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := ajs.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: BucketSecrets})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{SecretKey("orders", "partner"), SecretKey("eu.x", "partner"), SecretKey("x", "partner")} {
		if _, err := kv.Put(ctx, k, []byte("value of "+k)); err != nil {
			t.Fatal(err)
		}
	}
	orders := connectAs(t, s, "worker-orders", "wo")
	eu := connectAs(t, s, "worker-eu.x", "we")
	edge := connectAs(t, s, UserEdge, "e")
	every := connectAs(t, s, UserWorker, "w")

	get := func(c *roleConn, pool string) string {
		t.Helper()
		m, err := c.Request(SecretGetPrefix+"."+SecretKey(pool, "partner"), nil, 2*time.Second)
		if err != nil {
			t.Fatalf("reading pool %s's secret: %v", pool, err)
		}
		return string(m.Data)
	}
	if got := get(orders, "orders"); got != "value of partner.orders" {
		t.Fatalf("pool orders' worker read %q", got)
	}
	if got := get(eu, "eu.x"); got != "value of partner.eu.x" {
		t.Fatalf("pool eu.x's worker read %q", got)
	}
	if got := get(every, "x"); got != "value of partner.x" {
		t.Fatalf("a worker of every pool read %q", got)
	}
	other := SecretGetPrefix + "." + SecretKey("eu.x", "partner")
	orders.denied(t, "worker of pool orders reads pool eu.x's secret", other, func() { _ = orders.PublishRequest(other, orders.NewInbox(), nil) })
	// Pool "x" is the last token of pool "eu.x"'s keys: a worker of eu.x
	// still reads only its own.
	x := SecretGetPrefix + "." + SecretKey("x", "partner")
	eu.denied(t, "worker of pool eu.x reads pool x's secret", x, func() { _ = eu.PublishRequest(x, eu.NewInbox(), nil) })
	edge.denied(t, "edge reads a secret", SecretGetPrefix+".partner.orders", func() {
		_ = edge.PublishRequest(SecretGetPrefix+".partner.orders", edge.NewInbox(), nil)
	})
	st := "KV_" + BucketSecrets
	for _, subj := range []string{
		"$JS.API.STREAM.INFO." + st,     // lists the keys
		"$JS.API.STREAM.MSG.GET." + st,  // gets any sequence
		"$JS.API.DIRECT.GET." + st,      // direct get by sequence
		"$JS.API.CONSUMER.CREATE." + st, // watches every value
	} {
		orders.denied(t, "worker reads the secrets bucket by "+subj, subj, func() { _ = orders.PublishRequest(subj, orders.NewInbox(), []byte(`{"seq":1}`)) })
	}
	orders.denied(t, "worker listens to secret writes", "$KV."+BucketSecrets+".>", func() {
		_, _ = orders.Subscribe("$KV."+BucketSecrets+".>", func(*nats.Msg) {})
	})
	orders.denied(t, "worker writes a secret", "$KV."+BucketSecrets+".partner.orders", func() {
		_ = orders.Publish("$KV."+BucketSecrets+".partner.orders", []byte("x"))
	})
}

// An edge stores its SLA records in jetway_sla through a JetStream
// publish on jetway.sla.<node id> and may do nothing else with them: no
// other subject under the prefix, no reading, deleting or purging the
// records (its own or another node's). A worker may not publish them.
func TestSLARecordsOnlyEdgesAppend(t *testing.T) {
	s := roleServer(t, "eu")
	admin := connectAs(t, s, UserAdmin, "a")
	ajs, _ := jetstream.New(admin.Conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := ajs.CreateStream(ctx, jetstream.StreamConfig{Name: StreamSLA, Subjects: []string{SLAPrefix + ">"}})
	if err != nil {
		t.Fatal(err)
	}
	edge := connectAs(t, s, UserEdge, "e")
	ejs, _ := jetstream.New(edge.Conn)
	if _, err := ejs.Publish(ctx, SLAPrefix+"node1", []byte(`{"node":"node1"}`)); err != nil {
		t.Fatalf("an edge stores its SLA record: %v", err)
	}
	edge.allowed(t, "edge publishes its SLA record")
	if info, err := st.Info(ctx); err != nil || info.State.Msgs != 1 {
		t.Fatalf("records stored: %+v %v", info, err)
	}
	deep := SLAPrefix + "node1.more"
	edge.denied(t, "edge publishes under a deeper SLA subject", deep, func() { _ = edge.Publish(deep, nil) })
	for _, subj := range []string{
		"$JS.API.STREAM.INFO." + StreamSLA,
		"$JS.API.STREAM.PURGE." + StreamSLA,
		"$JS.API.STREAM.MSG.DELETE." + StreamSLA,
		"$JS.API.CONSUMER.CREATE." + StreamSLA,
		"$JS.API.DIRECT.GET." + StreamSLA,
	} {
		edge.denied(t, "edge reaches the SLA stream by "+subj, subj, func() { _ = edge.PublishRequest(subj, edge.NewInbox(), []byte(`{}`)) })
	}
	worker := connectAs(t, s, UserWorker, "w")
	worker.denied(t, "worker publishes an SLA record", SLAPrefix+"node1", func() { _ = worker.Publish(SLAPrefix+"node1", nil) })
	pooled := connectAs(t, s, "worker-orders", "wo")
	pooled.denied(t, "pool worker publishes an SLA record", SLAPrefix+"w1", func() { _ = pooled.Publish(SLAPrefix+"w1", nil) })
}

// An unknown role may do nothing.
func TestRolePermissionsUnknownRole(t *testing.T) {
	p := RolePermissions("wroker")
	if p == nil || p.Publish == nil || len(p.Publish.Allow) != 0 || len(p.Publish.Deny) != 1 || p.Publish.Deny[0] != ">" {
		t.Fatalf("unknown role: %+v", p)
	}
	if RolePermissions(UserAdmin) != nil {
		t.Fatal("admin is narrowed")
	}
}

// The configuration snippet for external clusters means exactly
// RolePermissions to a nats-server.
func TestPermissionsConfigParses(t *testing.T) {
	for _, tc := range []struct {
		role  string
		pools []string
	}{{UserEdge, nil}, {UserWorker, nil}, {UserWorker, []string{"orders", "eu.west"}}} {
		block, err := PermissionsConfig(tc.role, tc.pools...)
		if err != nil {
			t.Fatal(err)
		}
		conf := filepath.Join(t.TempDir(), "n.conf")
		text := "authorization { users = [ { user: u, password: p, " + block + " } ] }\n"
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		opts, err := server.ProcessConfigFile(conf)
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", tc.role, tc.pools, err, text)
		}
		got, want := opts.Users[0].Permissions, RolePermissions(tc.role, tc.pools...)
		if !reflect.DeepEqual(got.Publish.Allow, want.Publish.Allow) || !reflect.DeepEqual(got.Subscribe.Allow, want.Subscribe.Allow) ||
			!reflect.DeepEqual(got.Response, want.Response) {
			t.Fatalf("%s %v: parsed %+v %+v %+v, want %+v %+v %+v", tc.role, tc.pools, got.Publish, got.Subscribe, got.Response, want.Publish, want.Subscribe, want.Response)
		}
	}
	for _, bad := range [][]string{{"admin"}, {"wroker"}, {"edge", "orders"}, {"worker", "a.>"}} {
		if _, err := PermissionsConfig(bad[0], bad[1:]...); err == nil {
			t.Errorf("PermissionsConfig%v: no error", bad)
		}
	}
}
