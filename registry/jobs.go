package registry

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
)

// Job states. A job is pending until a worker takes it, running during an
// attempt, pending again between attempts, and ends succeeded, failed
// (the backend's last answer was a failure: not retried, or the attempts
// ran out), dead (it never got a final answer: it expired, or its API is
// gone) or cancelled. failed, dead and cancelled jobs are dead letters too.
const (
	JobPending   = "pending"
	JobRunning   = "running"
	JobSucceeded = "succeeded"
	JobFailed    = "failed"
	JobDead      = "dead"
	JobCancelled = "cancelled"
)

// Dead-letter reasons.
const (
	ReasonFailed     = "failed"            // the backend's answer is not retried
	ReasonExhausted  = "retries_exhausted" // every attempt failed
	ReasonExpired    = "expired"           // past the API's async max_age
	ReasonCancelled  = "cancelled"         // DELETE by its app
	ReasonAPIRemoved = "api_removed"       // its API (or its async block) is gone
	// ReasonCallback records a callback that was not delivered (the job
	// itself ended as its status says).
	ReasonCallback = "callback_failed"
)

// JobStatus is what BucketJobs keeps of a job under its id, and what its
// caller reads (GET /_jetway/jobs/{id}).
type JobStatus struct {
	ID   string `json:"id"`
	API  string `json:"api"`
	Tier string `json:"tier"`
	Pool string `json:"pool"`
	App  string `json:"app,omitempty"`
	// User is the subject of the token the job was submitted with (""
	// for a key or a signature): only that user of the app reads it.
	User        string     `json:"user,omitempty"`
	RequestID   string     `json:"request_id,omitempty"`
	State       string     `json:"state"`
	Attempts    int        `json:"attempts"`
	MaxAttempts int        `json:"max_attempts"`
	Submitted   time.Time  `json:"submitted"`
	Updated     time.Time  `json:"updated"`
	NextAttempt *time.Time `json:"next_attempt,omitempty"`
	// Reason says why a job is failed, dead or cancelled.
	Reason    string     `json:"reason,omitempty"`
	LastError *JobError  `json:"last_error,omitempty"`
	Result    *JobResult `json:"result,omitempty"`
	// Callbacks are the job's end told to its caller's callback URL and
	// the API's destinations, each with how it went.
	Callbacks []CallbackStatus `json:"callbacks,omitempty"`

	// Revision is the KV revision the status was read at (compare-and-set).
	Revision uint64 `json:"-"`
}

// Final reports whether the job has ended.
func (s *JobStatus) Final() bool {
	switch s.State {
	case JobSucceeded, JobFailed, JobDead, JobCancelled:
		return true
	}
	return false
}

// CallbackStatus is one callback of a job: where (a URL or a subject),
// pending, delivered or failed, after how many attempts, and why it
// failed last.
type CallbackStatus struct {
	To        string `json:"to"`
	State     string `json:"state"`
	Attempts  int    `json:"attempts"`
	LastError string `json:"last_error,omitempty"`
}

// Callback states.
const (
	CallbackPending   = "pending"
	CallbackDelivered = "delivered"
	CallbackFailed    = "failed"
)

// JobError is why an attempt failed: a gateway code (GATEWAY_TIMEOUT, …)
// or the backend's status.
type JobError struct {
	Code    string `json:"code,omitempty"`
	Status  int    `json:"status"`
	Message string `json:"message,omitempty"`
}

// JobResult is the backend's answer to the job's last attempt: its status
// and headers, and its body when the API's max_result allows (Body when it
// is UTF-8, else BodyBase64); Size is the body's length either way.
type JobResult struct {
	Status     int                 `json:"status"`
	Headers    map[string][]string `json:"headers,omitempty"`
	Body       *string             `json:"body,omitempty"`
	BodyBase64 []byte              `json:"body_base64,omitempty"`
	Size       int                 `json:"size"`
	// Omitted: the body was larger than max_result and is not kept.
	Omitted bool `json:"omitted,omitempty"`
	// Stored names the object (in bus.BucketJobResults) that keeps a
	// body larger than max_result; GET …/result serves it.
	Stored string `json:"stored,omitempty"`
}

// NewJobResult keeps an answer within maxBody bytes of body.
func NewJobResult(status int, h http.Header, body []byte, maxBody int) *JobResult {
	r := &JobResult{Status: status, Headers: h, Size: len(body)}
	switch {
	case len(body) > maxBody:
		r.Omitted = true
	case len(body) == 0:
	case utf8.Valid(body):
		s := string(body)
		r.Body = &s
	default:
		r.BodyBase64 = body
	}
	return r
}

// StoreResult keeps a result body larger than an API's max_result as one
// message of the results stream, and returns its subject: a new one per
// attempt, under the job's pool.
func (s *JobStore) StoreResult(ctx context.Context, id string, attempt int, body []byte) (string, error) {
	subj := bus.JobResultSubject(id, attempt)
	if _, err := s.js.PublishMsg(ctx, &nats.Msg{Subject: subj, Data: body}); err != nil {
		return "", fmt.Errorf("storing job %s's result: %w", id, err)
	}
	return subj, nil
}

// LoadResult reads a stored result body (ErrNotFound when it has gone:
// its TTL passed, or the stream made room).
func (s *JobStore) LoadResult(ctx context.Context, subject string) ([]byte, error) {
	if !strings.HasPrefix(subject, bus.JobResultPrefix) {
		return nil, fmt.Errorf("result %s: %w", subject, ErrNotFound)
	}
	m, err := directGet(ctx, s.nc, bus.StreamJobResults, subject)
	if err != nil {
		return nil, fmt.Errorf("reading result %s: %w", subject, err)
	}
	return m.Data, nil
}

// directGet reads the last message of subject in stream with one direct
// get (a request whose subject names the message's: what a role narrowed
// to some keys may be allowed). A missing or deleted one is ErrNotFound.
func directGet(ctx context.Context, nc *nats.Conn, stream, subject string) (*nats.Msg, error) {
	m, err := nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+stream+"."+subject, nil)
	if err != nil {
		return nil, err
	}
	switch st := m.Header.Get("Status"); {
	case st == "404":
		return nil, ErrNotFound
	case st != "":
		return nil, fmt.Errorf("status %s %s", st, m.Header.Get("Description"))
	}
	if op := m.Header.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
		return nil, ErrNotFound
	}
	return m, nil
}

// RawBody is the kept body as bytes.
func (r *JobResult) RawBody() []byte {
	if r.Body != nil {
		return []byte(*r.Body)
	}
	return r.BodyBase64
}

// NewJobID is a job id of an API tier of pool: the pool's token, a dot,
// and 128 random bits in lower-case base32 (26 characters) — unguessable,
// since an open API's job is found by its id alone. The pool is in the id
// so that a pool's workers may read and write their own pool's jobs
// only: the status key and the result subjects start with it.
func NewJobID(pool string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return bus.PoolToken(pool) + "." + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

// ValidJobID reports whether s has the shape NewJobID makes.
func ValidJobID(s string) bool {
	_, ok := JobPool(s)
	return ok
}

// JobPool is the pool token of a job id (ok: s is a job id).
func JobPool(s string) (poolToken string, ok bool) {
	if len(s) < 28 || s[len(s)-27] != '.' {
		return "", false
	}
	poolToken, r := s[:len(s)-27], s[len(s)-26:]
	for i := 0; i < len(r); i++ {
		if c := r[i]; !(c >= 'a' && c <= 'z' || c >= '2' && c <= '7') {
			return "", false
		}
	}
	if bus.ValidName(strings.ReplaceAll(poolToken, ":", ".")) != nil || strings.Contains(poolToken, ".") {
		return "", false
	}
	return poolToken, true
}

// IdempotentJobID is the id of the job an Idempotency-Key of an app
// makes on an API tier of pool: the same key, app and tier make the same
// job, whichever edge takes the call. Found from the key, as the key's
// semantics require; only the app that submitted a job may read it,
// except on an open API, where whoever holds the key could submit it
// again and learn the id anyway.
func IdempotentJobID(pool, apiKey, app, key string) string {
	sum := sha256.Sum256([]byte("jetway-job\x00" + apiKey + "\x00" + app + "\x00" + key))
	return bus.PoolToken(pool) + "." + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(sum[:16]))
}

// Errors of the job store.
var (
	ErrJobExists   = errors.New("job exists")
	ErrJobConflict = errors.New("job status changed meanwhile")
)

// JobStore reads and writes job statuses in BucketJobs. Each value has
// its own TTL (the API's result_ttl, counted from its last write), so a
// bucket needs no sweeper. It reads one key at a time with a direct get
// and writes with a publish on the key's subject — the only uses of the
// bucket a worker's user has, for its own pools' keys (bus.RolePermissions):
// no stream info, no consumer, so a worker lists and reads no other pool's.
type JobStore struct {
	nc *nats.Conn
	js jetstream.JetStream
}

// NewJobStore is the job store over nc (no I/O: the admin creates the
// bucket, OpenJobStreams).
func NewJobStore(nc *nats.Conn) (*JobStore, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	return &JobStore{nc: nc, js: js}, nil
}

// Get reads a job's status (ErrNotFound when there is none: never, or its
// TTL passed).
func (s *JobStore) Get(ctx context.Context, id string) (*JobStatus, error) {
	m, err := directGet(ctx, s.nc, "KV_"+bus.BucketJobs, bus.JobStatusSubject(id))
	if errors.Is(err, ErrNotFound) || (err == nil && len(m.Data) == 0) {
		return nil, fmt.Errorf("job %s: %w", id, ErrNotFound)
	} else if err != nil {
		return nil, fmt.Errorf("reading job %s: %w", id, err)
	}
	var st JobStatus
	if err := json.Unmarshal(m.Data, &st); err != nil {
		return nil, fmt.Errorf("job %s: stored status is damaged: %w", id, err)
	}
	if st.ID != id {
		return nil, fmt.Errorf("job %s: stored status is another's", id)
	}
	st.Revision, _ = strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
	return &st, nil
}

// Create stores a new job's status (ErrJobExists when its id has one).
func (s *JobStore) Create(ctx context.Context, st *JobStatus, ttl time.Duration) error {
	return s.write(ctx, bus.JobKeyPrefix+st.ID, st, 0, ttl)
}

// Update stores st at its Revision only (ErrJobConflict when the status
// changed since it was read), and sets st.Revision to the new one.
func (s *JobStore) Update(ctx context.Context, st *JobStatus, ttl time.Duration) error {
	return s.write(ctx, bus.JobKeyPrefix+st.ID, st, st.Revision, ttl)
}

func (s *JobStore) write(ctx context.Context, key string, st *JobStatus, rev uint64, ttl time.Duration) error {
	st.Updated = time.Now().UTC()
	b, ok := appendJobStatus(make([]byte, 0, 512), st)
	if !ok {
		var err error
		if b, err = json.Marshal(st); err != nil {
			return err
		}
	}
	n, err := s.put(ctx, key, b, rev, ttl, false)
	switch {
	case err == nil:
		st.Revision = n
		return nil
	case isWrongLastSeq(err) && rev == 0:
		return ErrJobExists
	case isWrongLastSeq(err):
		return ErrJobConflict
	}
	return fmt.Errorf("writing job %s: %w", st.ID, err)
}

// Discard removes the status an edge wrote for a job it then could not
// publish (bus.HdrJobStatus), at the revision written, with a delete
// marker kept for a minute: no one was told the job's id, and the bucket
// would keep a status that never ends until its TTL. Best effort.
func (s *JobStore) Discard(ctx context.Context, st *JobStatus) error {
	_, err := s.put(ctx, bus.JobKeyPrefix+st.ID, nil, st.Revision, jobStatusMarkerTTL, true)
	return err
}

// put is a KV compare-and-set with the value's own TTL: a publish on the
// key's subject with the expected last sequence (0: none) and Nats-TTL;
// del makes it a delete marker.
func (s *JobStore) put(ctx context.Context, key string, value []byte, rev uint64, ttl time.Duration, del bool) (uint64, error) {
	m := nats.NewMsg(kvSubject(bus.BucketJobs, key))
	m.Data = value
	if del {
		m.Header.Set("KV-Operation", "DEL")
	}
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(rev, 10))
	if ttl > 0 {
		m.Header.Set("Nats-TTL", strconv.FormatInt(int64((ttl+time.Second-1)/time.Second), 10)+"s")
	}
	seq, _, err := publishAck(ctx, s.nc, m)
	return seq, err
}

// Publish stores a job's message in the jobs stream (deduplicated by its
// Nats-Msg-Id within two minutes: duplicate says the stream had it).
func (s *JobStore) Publish(ctx context.Context, m *nats.Msg) (duplicate bool, err error) {
	_, duplicate, err = publishAck(ctx, s.nc, m)
	return duplicate, err
}

// Job stream bounds. A job waits at most MaxAsyncAge; the stream refuses
// new jobs (never drops one it accepted) past JobsMaxBytes in all or
// JobsMaxPerAPI queued for one API tier. The status bucket refuses a new
// status past JobsBucketMaxBytes (a status is a few KiB: results above
// max_result go to the results stream, which makes room by dropping its
// oldest). A server without the room gets the largest halving of each it
// can reserve.
const (
	JobsMaxBytes          = 1 << 30
	JobsMaxPerAPI         = 100_000
	DeadLettersMaxAge     = 30 * 24 * time.Hour
	DeadLettersMaxByte    = 1 << 30
	JobsBucketMaxBytes    = 4 << 30
	JobResultsMaxBytes    = 4 << 30
	jobStatusMaxValue     = int32(MaxAsyncResult)*6 + 64<<10 // the largest kept body JSON-escaped, and the rest
	jobStatusMarkerTTL    = time.Minute
	jobStatusBucketMaxAge = MaxAsyncAge + 24*time.Hour // each value has its own, shorter TTL
)

// JobKeepAge keeps a status that must outlast any wait of its job's
// message in the jobs stream (a cancel, a replay's pending): the stream's
// bound on a job's wait and a day, as long as the bucket keeps anything.
const JobKeepAge = jobStatusBucketMaxAge

// OpenJobStreams opens what async jobs are kept in, creating it when
// missing: the jobs stream (work queue: a job is gone once a worker acks
// it), the status bucket, the results stream and the dead letters. The
// status bucket is a KV bucket's stream made by hand, to deny what a KV
// bucket allows: a rollup (Nats-Rollup: all would let any edge or
// worker, whose users write statuses, wipe every job's), deletes and
// purges by the API.
func OpenJobStreams(ctx context.Context, js jetstream.JetStream, o BucketOptions) error {
	streams := []jetstream.StreamConfig{{
		Name:                   "KV_" + bus.BucketJobs,
		Description:            "Jetway async job statuses (key j.<pool token>.<id>): edges and each pool's workers write their own",
		Subjects:               []string{"$KV." + bus.BucketJobs + ".>"},
		MaxMsgsPerSubject:      1,
		Discard:                jetstream.DiscardNew,
		MaxAge:                 jobStatusBucketMaxAge,
		MaxBytes:               JobsBucketMaxBytes,
		MaxMsgSize:             jobStatusMaxValue,
		AllowDirect:            true,
		AllowMsgTTL:            true,
		SubjectDeleteMarkerTTL: jobStatusMarkerTTL,
		DenyDelete:             true,
		DenyPurge:              true,
		Duplicates:             2 * time.Minute,
		Storage:                jetstream.FileStorage,
		Replicas:               max(o.Replicas, 1),
	}, {
		Name:                 bus.StreamJobs,
		Description:          "Jetway async jobs (edges publish; each pool's workers take theirs from one durable consumer)",
		Subjects:             []string{bus.JobsPrefix + ">"},
		Retention:            jetstream.WorkQueuePolicy,
		Discard:              jetstream.DiscardNew,
		DiscardNewPerSubject: true,
		MaxMsgsPerSubject:    JobsMaxPerAPI,
		MaxAge:               MaxAsyncAge,
		MaxBytes:             JobsMaxBytes,
		MaxMsgSize:           int32(MaxMaxBody) + 64<<10,
		Duplicates:           2 * time.Minute,
		AllowDirect:          true,
		Storage:              jetstream.FileStorage,
		Replicas:             max(o.Replicas, 1),
	}, {
		Name:        bus.StreamJobResults,
		Description: "Jetway async job results larger than their API's max_result (each pool's workers write theirs, edges read)",
		Subjects:    []string{bus.JobResultPrefix + ">"},
		Discard:     jetstream.DiscardOld,
		MaxAge:      jobStatusBucketMaxAge,
		MaxBytes:    JobResultsMaxBytes,
		MaxMsgSize:  int32(MaxMaxBody) + 64<<10,
		AllowDirect: true,
		DenyDelete:  true,
		DenyPurge:   true,
		Storage:     jetstream.FileStorage,
		Replicas:    max(o.Replicas, 1),
	}, {
		Name:        bus.StreamDeadLetters,
		Description: "Jetway dead letters: async jobs that ended without success (jetway dlq)",
		Subjects:    []string{bus.DeadLetterPrefix + ">"},
		Discard:     jetstream.DiscardOld,
		MaxAge:      DeadLettersMaxAge,
		MaxBytes:    DeadLettersMaxByte,
		MaxMsgSize:  int32(MaxMaxBody) + 128<<10,
		Duplicates:  2 * time.Minute,
		AllowDirect: true,
		Storage:     jetstream.FileStorage,
		Replicas:    max(o.Replicas, 1),
	}}
	for _, cfg := range streams {
		if _, err := js.Stream(ctx, cfg.Name); err == nil {
			continue
		} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("opening stream %s: %w", cfg.Name, err)
		}
		if err := createPushStream(ctx, js, cfg); err != nil {
			return err
		}
	}
	return nil
}
