package bus

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Async jobs on a real server with the roles' users: a pool's workers
// take their own pool's jobs through the pool's consumer and may make no
// consumer that would take another pool's, nor write its dead letters;
// the edge stores jobs and statuses but takes none.
func TestJobsAreEachPoolsOwn(t *testing.T) {
	s := roleServer(t, "eu.x")
	admin := connectAs(t, s, UserAdmin, "a")
	ajs, _ := jetstream.New(admin.Conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := ajs.CreateStream(ctx, jetstream.StreamConfig{Name: StreamJobs, Subjects: []string{JobsPrefix + ">"}, Retention: jetstream.WorkQueuePolicy, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := ajs.CreateStream(ctx, jetstream.StreamConfig{Name: StreamDeadLetters, Subjects: []string{DeadLetterPrefix + ">"}}); err != nil {
		t.Fatal(err)
	}
	// The status bucket as registry.OpenJobStreams makes it: no rollups.
	if _, err := ajs.CreateStream(ctx, jetstream.StreamConfig{Name: "KV_" + BucketJobs, Subjects: []string{"$KV." + BucketJobs + ".>"},
		MaxMsgsPerSubject: 1, AllowDirect: true, DenyDelete: true, DenyPurge: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := ajs.CreateStream(ctx, jetstream.StreamConfig{Name: StreamJobResults, Subjects: []string{JobResultPrefix + ">"}, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}
	statusGet := func(c *roleConn, key string) *nats.Msg {
		t.Helper()
		m, err := c.Request("$JS.API.DIRECT.GET.KV_"+BucketJobs+".$KV."+BucketJobs+"."+key, nil, 2*time.Second)
		if err != nil {
			t.Fatalf("reading status %s: %v", key, err)
		}
		return m
	}

	edge := connectAs(t, s, UserEdge, "e")
	ejs, _ := jetstream.New(edge.Conn)
	if _, err := ejs.Publish(ctx, JobSubject("orders", TierAPI, "orders.get"), []byte("job")); err != nil {
		t.Fatalf("edge stores a job: %v", err)
	}
	if _, err := ejs.Publish(ctx, JobSubject("eu.x", TierAPI, "a"), []byte("job")); err != nil {
		t.Fatalf("edge stores a job: %v", err)
	}
	for _, key := range []string{JobKeyPrefix + "orders.abc", JobKeyPrefix + "eu:x.abc"} {
		if _, err := ejs.Publish(ctx, "$KV."+BucketJobs+"."+key, []byte(`{"state":"pending"}`)); err != nil {
			t.Fatalf("edge writes job status %s: %v", key, err)
		}
		if m := statusGet(edge, key); string(m.Data) != `{"state":"pending"}` {
			t.Fatalf("edge reads job status %s: %q", key, m.Data)
		}
	}
	// No one wipes the statuses with a rollup.
	rollup := nats.NewMsg("$KV." + BucketJobs + "." + JobKeyPrefix + "orders.x")
	rollup.Header.Set("Nats-Rollup", "all")
	if _, err := ejs.PublishMsg(ctx, rollup); err == nil {
		t.Fatal("a rollup of the job statuses was taken")
	}
	// The edge reads the queues' depth and oldest job, and the dead
	// letters' counts (metrics and alerts).
	est, err := ejs.Stream(ctx, StreamJobs)
	if err != nil {
		t.Fatalf("edge reads the jobs stream's info: %v", err)
	}
	if info, err := est.Info(ctx, jetstream.WithSubjectFilter(JobsPrefix+">")); err != nil || len(info.State.Subjects) != 2 {
		t.Fatalf("edge reads the queues: %+v %v", info, err)
	}
	if m, err := est.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(JobSubject("orders", TierAPI, "orders.get"))); err != nil || string(m.Data) != "job" {
		t.Fatalf("edge reads a tier's oldest job: %v", err)
	}
	if _, err := ejs.Stream(ctx, StreamDeadLetters); err != nil {
		t.Fatalf("edge reads the dead letters' info: %v", err)
	}
	// The edge follows a job's status (its event stream) and nothing else
	// of the bucket's subjects.
	// (A job id is its pool's token, a dot and 26 random letters.)
	follow, err := edge.SubscribeSync(JobStatusSubject("orders.abcdefghijklmnopqrstuvwxyz"))
	if err != nil {
		t.Fatal(err)
	}
	edge.allowed(t, "edge follows a job's status")
	if _, err := ajs.Publish(ctx, JobStatusSubject("orders.abcdefghijklmnopqrstuvwxyz"), []byte(`{"state":"running"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := follow.NextMsg(2 * time.Second); err != nil {
		t.Fatalf("edge hears a job's status change: %v", err)
	}
	edge.denied(t, "edge takes jobs", "$JS.API.CONSUMER.CREATE."+StreamJobs+"."+JobConsumer("orders")+"."+JobsPrefix+"orders.>", func() {
		_ = edge.PublishRequest("$JS.API.CONSUMER.CREATE."+StreamJobs+"."+JobConsumer("orders")+"."+JobsPrefix+"orders.>", edge.NewInbox(), nil)
	})

	orders := connectAs(t, s, "worker-orders", "wo")
	ojs, _ := jetstream.New(orders.Conn)
	cons, err := ojs.CreateOrUpdateConsumer(ctx, StreamJobs, jetstream.ConsumerConfig{Durable: JobConsumer("orders"),
		FilterSubject: JobsPrefix + PoolToken("orders") + ".>", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatalf("pool orders' worker makes its consumer: %v", err)
	}
	batch, err := cons.Fetch(5, jetstream.FetchMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for m := range batch.Messages() {
		n++
		if m.Subject() != JobSubject("orders", TierAPI, "orders.get") {
			t.Fatalf("pool orders took %s", m.Subject())
		}
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatalf("acking a job: %v", err)
		}
	}
	if n != 1 {
		t.Fatalf("pool orders took %d jobs, want its 1", n)
	}
	if _, err := ojs.Publish(ctx, DeadLetterSubject("orders", TierAPI, "orders.get"), []byte("dead")); err != nil {
		t.Fatalf("pool orders writes its dead letter: %v", err)
	}
	if _, err := ojs.Publish(ctx, "$KV."+BucketJobs+"."+JobKeyPrefix+"orders.abc", []byte(`{"state":"running"}`)); err != nil {
		t.Fatalf("worker writes its pool's job status: %v", err)
	}
	if m := statusGet(orders, JobKeyPrefix+"orders.abc"); string(m.Data) != `{"state":"running"}` {
		t.Fatalf("worker reads its pool's job status: %q", m.Data)
	}
	if _, err := ojs.Publish(ctx, JobResultSubject("orders.abc", 1), []byte("big result")); err != nil {
		t.Fatalf("worker stores its pool's result: %v", err)
	}
	if _, err := ojs.Publish(ctx, JobSubject("orders", TierCallback, "orders.get"), []byte("{}")); err != nil {
		t.Fatalf("worker stores its pool's callback: %v", err)
	}
	if m, err := edge.Request("$JS.API.DIRECT.GET."+StreamJobResults+"."+JobResultSubject("orders.abc", 1), nil, 2*time.Second); err != nil || string(m.Data) != "big result" {
		t.Fatalf("edge reads a stored result: %v", err)
	}
	edge.denied(t, "edge stores a callback message", JobSubject("orders", TierCallback, "x"), func() {
		_ = edge.Publish(JobSubject("orders", TierCallback, "x"), []byte("{}"))
	})

	// Another pool's consumer, or its own name with another pool's
	// filter, or every pool's: refused.
	for _, subj := range []string{
		"$JS.API.CONSUMER.CREATE." + StreamJobs + "." + JobConsumer("eu.x") + "." + JobsPrefix + PoolToken("eu.x") + ".>",
		"$JS.API.CONSUMER.CREATE." + StreamJobs + "." + JobConsumer("orders") + "." + JobsPrefix + PoolToken("eu.x") + ".>",
		"$JS.API.CONSUMER.CREATE." + StreamJobs + "." + JobConsumer("orders"),
		"$JS.API.CONSUMER.MSG.NEXT." + StreamJobs + "." + JobConsumer("eu.x"),
		DeadLetterSubject("eu.x", TierAPI, "a"),
		JobSubject("eu.x", TierAPI, "a"),
		JobSubject("eu.x", TierCallback, "a"),
		JobResultSubject("eu:x.abc", 1),
		"$KV." + BucketJobs + "." + JobKeyPrefix + "eu:x.abc",
		"$JS.API.DIRECT.GET.KV_" + BucketJobs + ".$KV." + BucketJobs + "." + JobKeyPrefix + "eu:x.abc",
		"$JS.API.DIRECT.GET.KV_" + BucketJobs,
		"$JS.API.STREAM.INFO.KV_" + BucketJobs,
		"$JS.API.CONSUMER.CREATE.KV_" + BucketJobs,
		"$JS.API.STREAM.MSG.GET.KV_" + BucketJobs,
	} {
		orders.denied(t, "pool orders' worker uses "+subj, subj, func() { _ = orders.PublishRequest(subj, orders.NewInbox(), []byte(`{}`)) })
	}
	// Through the library too: the create is refused, nothing taken.
	short, cancelShort := context.WithTimeout(ctx, time.Second)
	_, err = ojs.CreateOrUpdateConsumer(short, StreamJobs, jetstream.ConsumerConfig{Durable: JobConsumer("orders"),
		FilterSubject: JobsPrefix + ">", AckPolicy: jetstream.AckExplicitPolicy})
	cancelShort()
	if err == nil {
		t.Fatal("pool orders' worker widened its consumer to every pool's jobs")
	}
	info, err := ajs.Consumer(ctx, StreamJobs, JobConsumer("orders"))
	if err != nil {
		t.Fatal(err)
	}
	if f := info.CachedInfo().Config.FilterSubject; f != JobsPrefix+"orders.>" {
		t.Fatalf("pool orders' consumer filter is %q", f)
	}
}
