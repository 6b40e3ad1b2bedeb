package bus

import (
	"context"
	"testing"
	"time"

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
	if _, err := ajs.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: BucketJobs}); err != nil {
		t.Fatal(err)
	}

	edge := connectAs(t, s, UserEdge, "e")
	ejs, _ := jetstream.New(edge.Conn)
	if _, err := ejs.Publish(ctx, JobSubject("orders", TierAPI, "orders.get"), []byte("job")); err != nil {
		t.Fatalf("edge stores a job: %v", err)
	}
	if _, err := ejs.Publish(ctx, JobSubject("eu.x", TierAPI, "a"), []byte("job")); err != nil {
		t.Fatalf("edge stores a job: %v", err)
	}
	ekv, err := ejs.KeyValue(ctx, BucketJobs)
	if err != nil {
		t.Fatalf("edge opens the job statuses: %v", err)
	}
	if _, err := ekv.Create(ctx, JobKeyPrefix+"abc", []byte("{}")); err != nil {
		t.Fatalf("edge writes a job status: %v", err)
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
	if _, err := edge.SubscribeSync(JobStatusSubject("abc")); err != nil {
		t.Fatal(err)
	}
	edge.allowed(t, "edge follows a job's status")
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
	okv, err := ojs.KeyValue(ctx, BucketJobs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := okv.Put(ctx, JobKeyPrefix+"abc", []byte(`{"state":"running"}`)); err != nil {
		t.Fatalf("worker writes a job status: %v", err)
	}

	// Another pool's consumer, or its own name with another pool's
	// filter, or every pool's: refused.
	for _, subj := range []string{
		"$JS.API.CONSUMER.CREATE." + StreamJobs + "." + JobConsumer("eu.x") + "." + JobsPrefix + PoolToken("eu.x") + ".>",
		"$JS.API.CONSUMER.CREATE." + StreamJobs + "." + JobConsumer("orders") + "." + JobsPrefix + PoolToken("eu.x") + ".>",
		"$JS.API.CONSUMER.CREATE." + StreamJobs + "." + JobConsumer("orders"),
		"$JS.API.CONSUMER.MSG.NEXT." + StreamJobs + "." + JobConsumer("eu.x"),
		DeadLetterSubject("eu.x", TierAPI, "a"),
		JobSubject("eu.x", TierAPI, "a"),
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
