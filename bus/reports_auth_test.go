package bus

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The SLA report schedules (webhook URLs, mail settings, who gets which
// report) and their delivery records are the admin's only: the admin
// reads and writes them; no edge and no worker may read, watch or write
// a key of the bucket.
func TestReportsBucketIsTheAdminsOnly(t *testing.T) {
	s := roleServer(t, "eu")
	admin := connectAs(t, s, UserAdmin, "a")
	ajs, _ := jetstream.New(admin.Conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := ajs.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: BucketReports})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "schedule.cGF5", []byte(`{"owner":"pay"}`)); err != nil {
		t.Fatal(err)
	}
	if e, err := kv.Get(ctx, "schedule.cGF5"); err != nil || string(e.Value()) != `{"owner":"pay"}` {
		t.Fatalf("the admin reads a schedule: %v", err)
	}
	admin.allowed(t, "the admin uses the reports bucket")
	st := "KV_" + BucketReports
	for _, who := range []struct {
		name string
		c    *roleConn
	}{{"edge", connectAs(t, s, UserEdge, "e")}, {"worker", connectAs(t, s, UserWorker, "w")}, {"worker of a pool", connectAs(t, s, "worker-orders", "wo")}} {
		c := who.c
		for _, subj := range []string{
			"$JS.API.STREAM.INFO." + st,
			"$JS.API.STREAM.MSG.GET." + st,
			"$JS.API.DIRECT.GET." + st + ".$KV." + BucketReports + ".schedule.cGF5",
			"$JS.API.CONSUMER.CREATE." + st,
		} {
			c.denied(t, who.name+" reads the reports bucket by "+subj, subj, func() { _ = c.PublishRequest(subj, c.NewInbox(), []byte(`{"seq":1}`)) })
		}
		c.denied(t, who.name+" listens to report writes", "$KV."+BucketReports+".>", func() {
			_, _ = c.Subscribe("$KV."+BucketReports+".>", func(*nats.Msg) {})
		})
		c.denied(t, who.name+" writes a schedule", "$KV."+BucketReports+".schedule.cGF5", func() {
			_ = c.Publish("$KV."+BucketReports+".schedule.cGF5", []byte("x"))
		})
		c.denied(t, who.name+" takes the sender's lease", "$KV."+BucketReports+".lease", func() {
			_ = c.Publish("$KV."+BucketReports+".lease", []byte("x"))
		})
	}
}
