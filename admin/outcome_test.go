package admin_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/admin"
	"github.com/jetway-gw/jetway/registry"
)

// outcomeBody is the body of a 504 OUTCOME_UNKNOWN.
type outcomeBody struct {
	Code    string            `json:"code"`
	Message string            `json:"message"`
	Details map[string]string `json:"details"`
}

// bucketStream is the stream of a KV bucket, for a test to change.
func bucketStream(t *testing.T, e *env, bucket string) (jetstream.JetStream, jetstream.StreamConfig) {
	t.Helper()
	js, _ := jetstream.New(e.nc)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	return js, st.CachedInfo().Config
}

func updateStream(t *testing.T, js jetstream.JetStream, cfg jetstream.StreamConfig) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
}

func outcomeOf(t *testing.T, r resp) outcomeBody {
	t.Helper()
	var b outcomeBody
	if err := json.Unmarshal([]byte(r.body), &b); err != nil {
		t.Fatalf("%d %s: %v", r.status, r.body, err)
	}
	return b
}

// A write JetStream does not answer is neither a success nor a plain
// failure: 504 OUTCOME_UNKNOWN, naming the GET that shows whether it
// landed. Here the stream stores the write and never acks it (no_ack), so
// the GET shows it landed; then a server that takes a delete and never
// answers (the stream never seeing it, as a leader that lost quorum holds
// a proposal): 504 again, and the GET shows the entry still there.
func TestWriteWithoutAnswerIsOutcomeUnknown(t *testing.T) {
	t.Cleanup(admin.SetRequestTimeout(time.Second)) // runs after the server's close (startWith's cleanup)
	e := start(t)
	created := e.do(boot, "POST", "/v1/apis", entry)
	if created.status != 201 {
		t.Fatalf("create: %d %s", created.status, created.body)
	}
	js, cfg := bucketStream(t, e, registry.BucketAPIs)
	cfg.NoAck = true
	updateStream(t, js, cfg)

	changed := strings.Replace(entry, `"body":"ok"`, `"body":"late"`, 1)
	r := e.do(boot, "PUT", "/v1/apis/orders.get", changed, "If-Match", created.header.Get("ETag"))
	b := outcomeOf(t, r)
	if r.status != 504 || b.Code != "OUTCOME_UNKNOWN" || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("put without an answer: %d %s; want 504 OUTCOME_UNKNOWN", r.status, r.body)
	}
	if b.Details["check"] != "GET /v1/apis/orders.get" || b.Details["operation"] != "put" || b.Details["key"] != "orders.get" ||
		!strings.Contains(b.Message, "may or may not have landed") || !strings.Contains(b.Message, "GET /v1/apis/orders.get") {
		t.Errorf("body: %s", r.body)
	}
	if g := e.do(boot, "GET", "/v1/apis/orders.get", ""); g.status != 200 || !strings.Contains(g.body, `"late"`) {
		t.Errorf("the GET named: %d %s; want the write, landed", g.status, g.body)
	}

	// Nothing stores writes to orders.get any more; a subscriber takes
	// them and never answers.
	cfg.NoAck = false
	cfg.Subjects = []string{"$KV." + registry.BucketAPIs + ".draft.>"}
	updateStream(t, js, cfg)
	hold, err := e.nc.SubscribeSync("$KV." + registry.BucketAPIs + ".orders.get")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hold.Unsubscribe() }()
	_ = e.nc.Flush()
	tag := e.do(boot, "GET", "/v1/apis/orders.get", "").header.Get("ETag")
	r = e.do(boot, "DELETE", "/v1/apis/orders.get", "", "If-Match", tag)
	b = outcomeOf(t, r)
	if r.status != 504 || b.Code != "OUTCOME_UNKNOWN" || b.Details["operation"] != "delete" || !strings.Contains(b.Message, "the delete of api orders.get") {
		t.Fatalf("delete without an answer: %d %s; want 504 OUTCOME_UNKNOWN", r.status, r.body)
	}
	if _, err := hold.NextMsg(time.Second); err != nil {
		t.Errorf("the delete was not sent: %v", err)
	}
	if g := e.do(boot, "GET", "/v1/apis/orders.get", ""); g.status != 200 {
		t.Errorf("the GET named: %d %s; want the entry, still there", g.status, g.body)
	}
}

// A secret's delete that gets no answer is 504 as well, naming the list of
// its pool (no answer holds a value, this one neither).
func TestSecretDeleteWithoutAnswer(t *testing.T) {
	t.Cleanup(admin.SetRequestTimeout(time.Second))
	e := start(t)
	value := `{"url":"nats://partner:4222","user":"jetway","password":"hunter2-secret"}`
	if r := e.do(boot, "PUT", "/v1/secrets/orders/partner", value); r.status != 200 {
		t.Fatalf("put: %d %s", r.status, r.body)
	}
	js, cfg := bucketStream(t, e, registry.BucketSecrets)
	cfg.NoAck = true
	updateStream(t, js, cfg)
	r := e.do(boot, "DELETE", "/v1/secrets/orders/partner", "")
	b := outcomeOf(t, r)
	if r.status != 504 || b.Code != "OUTCOME_UNKNOWN" || b.Details["check"] != "GET /v1/secrets?pool=orders" || strings.Contains(r.body, "hunter2") {
		t.Fatalf("delete without an answer: %d %s", r.status, r.body)
	}
	if g := e.do(boot, "GET", "/v1/secrets?pool=orders", ""); g.status != 200 || strings.Contains(g.body, "partner") {
		t.Errorf("the GET named: %d %s; want the secret gone (no_ack stored the delete)", g.status, g.body)
	}
}
