package bus

import (
	"encoding/base64"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Subject and queue group prefixes. An API's requests travel on
// APIPrefix+pool token+"."+name (APISubject); every worker of the API's pool
// subscribes to that subject in the queue group QueuePrefix+pool, so each
// request reaches exactly one worker of the pool. An API's sandbox tier
// travels on SandboxPrefix+pool token+"."+name with the tier's pool.
const (
	APIPrefix     = "jetway.api."
	SandboxPrefix = "jetway.sandbox."
	QueuePrefix   = "jetway.pool."
)

// Control subjects: what nodes tell each other besides API calls. Each is
// an attack surface (a compromised node may forge whatever its NATS user may
// publish), so each says what a forged message can at most do, and
// RolePermissions gives each role only the ones it must publish.
const (
	// BreakerPrefix starts the subject of a breaker change:
	// jetway.breaker.<pool token>.<api> (BreakerSubject). Only the workers
	// of the API's pool may publish it (per-pool users), and a worker
	// applies it only when the subject's pool is the API's pool in its
	// registry snapshot. A forged event can at most open the API's
	// breaker for the policy's max_open_for (resilience.Breaker.Apply
	// clamps open_until, the event time and the gen), or close it early:
	// the same a failing or recovering backend does.
	BreakerPrefix = "jetway.breaker."
	// ChannelReportPrefix starts the subject each worker reports the
	// outcomes of an API's channels on, every second:
	// ChannelReportPrefix + PoolToken(pool) + "." + api. Only the pool's
	// workers publish and hear it: a forged report can sway the pool's
	// own controller, never another pool's (each report's counts are
	// bounded by what a window can hold).
	ChannelReportPrefix = "jetway.channels.report."
	// ChannelEventPrefix starts the subject the controller of an API's
	// channel set publishes each change of a channel's state on:
	// ChannelEventPrefix + PoolToken(pool) + "." + api. Edges hear it
	// (the alerts' input).
	ChannelEventPrefix = "jetway.channels.event."
	// ChannelOutcomePrefix starts the subject an edge passes an API's late
	// outcome reports on (edge/outcomes.go) to the API's pool:
	// ChannelOutcomePrefix + PoolToken(pool) + "." + api. Edges publish,
	// the pool's workers hear it; each report counts as calls of the
	// channels it names, bounded like a worker's report.
	ChannelOutcomePrefix = "jetway.channels.outcome."
	// RateLimitSubject carries the edges' cluster-wide rate-limit
	// reports. Only edges publish it. A forged report counts as one more
	// edge whose counts are clamped to [0, the rule's limit]: it can make
	// a cluster-wide rule refuse for three report intervals after it — as
	// an honest edge that admitted the whole limit would — but never let
	// more calls through than the limit.
	RateLimitSubject = "jetway.ratelimit.report"
	// MetricsPrefix starts the subject each edge publishes its per-second
	// records on: jetway.metrics.<role>.<node id>. A forged record can at
	// most skew the success-rate and p99 alerts of an API the registry
	// knows, for the seconds it claims (records of unknown APIs, of other
	// nodes than the subject's, of seconds out of the alert window, or
	// with negative counts are dropped).
	MetricsPrefix = "jetway.metrics."
	// MetricsQuerySubject is where every edge answers for the per-second
	// records it keeps of an API (jetway metric's recent history). It lies
	// outside MetricsPrefix, so those who follow the records never see
	// the questions. A forged query costs an edge one bounded answer
	// (an hour of one API's records) sent to whoever asked; the records
	// are no secret to anyone who may follow MetricsPrefix.
	MetricsQuerySubject = "jetway.query.metrics"
	// PushQuerySubject is where every edge answers operators' questions
	// about its push connections (push.Query: stats, the connections,
	// a kick). Only the admin NATS user may ask (the admin API, for its
	// operators, and the CLI): a kick ends connections.
	PushQuerySubject = "jetway.query.push"
	// PushCensusSubject carries each edge's count of push connections
	// per app and busy client address, once a second, for the
	// cluster-wide connection caps (push/census.go). Only edges publish
	// it, and edges enforce the caps: a forged census (bounded in size)
	// can make the other edges refuse for three seconds or hide
	// connections from them, nothing an edge's credentials do not allow
	// already. It lies outside the push streams' subjects.
	PushCensusSubject = "jetway.census.push"
	// AlertPrefix starts the subject of alert events:
	// jetway.alerts.<rule>.<target>. Edges publish them for operators;
	// no Jetway node acts on them, so a forged one misleads only a
	// human reading the stream.
	AlertPrefix = "jetway.alerts."
	// HeartbeatPrefix starts the subject of heartbeats:
	// jetway.heartbeat.<role>.<id>. A role may beat only under its own
	// role; a forged beat can at most add a node of that role to
	// /nodes and the alerts' live set (bounded: MaxTrackedNodes, fields
	// clamped) or drop another node of that role until its next beat.
	HeartbeatPrefix = "jetway.heartbeat."
	// SiteEventSubject is where an edge says its calls moved between its
	// NATS clusters (a primary and a standby: --nats-standby), published
	// on both. Edges publish it.
	SiteEventSubject = "jetway.events.site"
	// CachePurgeSubject is where the admin asks every edge to drop an
	// API's cached answers ({"api":…,"path":…}); each edge answers with
	// how many it dropped. Only the admin publishes it: a forged purge
	// could at most send an API's calls to its backend until the cache
	// fills again.
	CachePurgeSubject = "jetway.cache.purge"
	// AuditPrefix starts the subject of the audit trail:
	// jetway.audit.<kind>, one message per change written through the
	// registry client (CLI, REST, console), kept in StreamAudit. Only the
	// admin publishes and reads it: no edge or worker can forge or read
	// who changed what.
	AuditPrefix = "jetway.audit."
	// StreamAudit keeps the audit trail.
	StreamAudit = "jetway_audit"
	// SLAPrefix starts the subject of an edge's per-minute SLA records:
	// jetway.sla.<node id>, kept in StreamSLA for the SLA reports
	// (otel/sla.go, jetway report). Edges publish them (any node id: the
	// edges share one user); only the admin reads them. A forged record
	// can at most skew the reports of the minutes it claims — add calls,
	// failures or breaker openings to an API's figures — never remove
	// another node's records (edges may not delete, purge or read).
	SLAPrefix = "jetway.sla."
	// StreamSLA keeps the SLA records (35 days by default).
	StreamSLA = "jetway_sla"
)

// CachePurge is a purge request on CachePurgeSubject: an API's cached
// answers, or only those of one path.
type CachePurge struct {
	API  string `json:"api"`
	Path string `json:"path,omitempty"`
}

// CachePurged is an edge's answer to a CachePurge: how many answers it
// dropped.
type CachePurged struct {
	Purged int `json:"purged"`
}

// ServicePrefix starts every subject a worker may send a backend call to
// on Jetway's own NATS (backends of type nats): a NATS service that
// Jetway fronts listens under it. A worker's user may publish nowhere else
// outside Jetway's own subjects, so an API entry cannot lend the worker's
// rights (its breaker events, the registry's KV API) to its callers; the
// registry refuses any other subject at publish.
const ServicePrefix = "svc."

// Inbox prefixes per role. Replies and JetStream deliveries (registry
// watches included) go to the connection's inbox; each role subscribes only
// to its own, so a worker cannot listen to the edges' watch of the apps
// bucket and read the signing secrets in passing.
const (
	InboxPrefixEdge   = "_INBOX_edge"
	InboxPrefixWorker = "_INBOX_worker"
)

// InboxPrefix is the inbox prefix a role's connections use ("" for the
// admin, which keeps nats.go's default). A worker narrowed to pools hears
// replies under a prefix of its own pool set, _INBOX_worker.<pool
// tokens joined by '+'> ('+' is in no name), so that a worker of one pool
// cannot overhear the answers to another pool's fallback calls: its user
// may subscribe to its own prefix only (RolePermissions). No pools (serve,
// every pool) is _INBOX_worker.
func InboxPrefix(role string, pools ...string) string {
	switch role {
	case UserEdge:
		return InboxPrefixEdge
	case UserWorker:
		if len(pools) == 0 {
			return InboxPrefixWorker
		}
		toks := make([]string, len(pools))
		for i, p := range pools {
			toks[i] = PoolToken(p)
		}
		slices.Sort(toks)
		return InboxPrefixWorker + "." + strings.Join(slices.Compact(toks), "+")
	}
	return ""
}

// ServicesPrefix starts the subjects of the NATS services protocol
// ($SRV.PING, $SRV.INFO, $SRV.STATS, each also .<name> and .<name>.<id>),
// which Jetway's workers answer so `nats micro ls` shows them.
const ServicesPrefix = "$SRV."

// ServiceName is the name every worker answers the NATS services protocol
// under: each worker is one instance, its pools in its metadata and its
// APIs as endpoints (subject and queue group name the pool). One name for
// all, rather than one per pool, because a worker narrowed to pools may
// run as a user of every pool (serve's embedded worker user), and an
// instance must not need to know which.
const ServiceName = "jetway-workers"

// ServiceSubjects are the NATS services subjects a worker answers: the
// three verbs for every service, and for Jetway's name and instances.
func ServiceSubjects() []string {
	var subs []string
	for _, verb := range []string{"PING", "INFO", "STATS"} {
		subs = append(subs, ServicesPrefix+verb, ServicesPrefix+verb+"."+ServiceName, ServicesPrefix+verb+"."+ServiceName+".*")
	}
	return subs
}

// IsReplyInbox reports whether a reply subject is an inbox, where Jetway's
// requesters (edges, workers, the CLI) wait for answers: under nats.go's
// default prefix "_INBOX." or a role's own. A worker answers only there.
// The reply subject is the sender's to choose and NATS lets the receiver
// publish its answer on it whatever it is (allow_responses), so an edge or
// a worker of another pool could otherwise name a control subject —
// jetway.breaker.<pool>.<api> of any pool — and have an honest worker
// publish a backend's answer there, which an echoing API lets it write.
func IsReplyInbox(subject string) bool {
	for _, p := range [...]string{"_INBOX.", InboxPrefixEdge + ".", InboxPrefixWorker + "."} {
		if len(subject) > len(p) && subject[:len(p)] == p {
			return true
		}
	}
	return false
}

// Registry buckets (JetStream KV). A bucket's stream is KV_<bucket>; who
// may read and write each is in RolePermissions.
const (
	BucketAPIs    = "jetway_apis"    // API definitions: edges and workers read
	BucketFlags   = "jetway_flags"   // live switches: edges and workers read
	BucketApps    = "jetway_apps"    // apps, key digests, signing secrets: edges only
	BucketAlerts  = "jetway_alerts"  // alert rules: edges read
	BucketNonces  = "jetway_nonces"  // nonces of signed requests: edges write
	BucketCerts   = "jetway_certs"   // TLS certificates and their keys: edges only
	BucketACME    = "jetway_acme"    // ACME account key and obtained certificates: edges read and write
	BucketSchemas = "jetway_schemas" // gRPC schemas (FileDescriptorSets) by digest: workers read

	BucketJSONSchemas = "jetway_jsonschemas"  // JSON Schemas shared by request validations: edges read
	BucketCache       = "jetway_cache"        // the shared response cache (cache.shared): edges read and write
	BucketAdminTokens = "jetway_admin_tokens" // the admin REST API's tokens (digests only): the admin only
	BucketTopics      = "jetway_topics"       // push topics: edges read
	BucketPushAcks    = "jetway_push_acks"    // push subscribers' cumulative acks: edges read and write
	BucketSecrets     = "jetway_secrets"      // backend credentials by pool: each pool's workers read their own
	BucketReports     = "jetway_reports"      // SLA report schedules, their deliveries and the sender's lease: the admin only
	BucketChannels    = "jetway_channels"     // channel sets' states, controller leases, manual overrides: each pool's workers read theirs and write states and leases
)

// SecretKey is the KV key of a pool's secret: <name>.<pool>. A name has
// no dots, so the key names one pool and one secret; a worker of a pool
// may get only the keys that end in its pool (SecretRead).
func SecretKey(pool, name string) string { return name + "." + pool }

// SecretRead are the subjects a worker of pools publishes to read their
// secrets (every pool's: none given): direct gets of the last value of one
// key, whose subject names the key. Nothing else of the bucket: no stream
// info (its subject listing names every pool's secrets), no consumer (a
// watch would deliver every value), no get by sequence (it would reach
// another pool's value).
func SecretRead(pools ...string) []string {
	get := SecretGetPrefix + "."
	if len(pools) == 0 {
		return []string{get + ">"}
	}
	out := make([]string, 0, len(pools))
	for _, p := range pools {
		out = append(out, get+"*."+p)
	}
	return out
}

// SecretGetPrefix is the subject prefix of a direct get of a secret's
// last value: SecretGetPrefix + "." + SecretKey(pool, name).
const SecretGetPrefix = "$JS.API.DIRECT.GET.KV_" + BucketSecrets + ".$KV." + BucketSecrets

// PushStore is where push messages are kept (push/): a stream and the
// prefix of its subjects,
//
//	<prefix><topic>.<kind>.<app>.<id>.<key>
//
// kind is all (every subscriber), app (the app's clients), dev (one device
// of the app); the topic is PoolToken'd (its dots become ':', so that
// topic a's subjects never cover topic a.b's); app, id and key are
// PushToken'd, "_" when they do not apply.
//
// Two stores for every topic rather than a stream per topic: a role's
// permissions name streams exactly (a NATS wildcard is a whole token), so
// the edge may read these two and no other. A topic's retention is each
// message's own TTL (Nats-TTL). latest_only topics have their own stream
// that keeps one message per subject; neither allows rollups, so no
// publisher — a compromised edge included — can wipe what others wrote.
type PushStore struct {
	Stream, Prefix string
}

// The push stores: durable and best_effort topics, and latest_only ones.
var (
	PushDurable = PushStore{Stream: "jetway_push", Prefix: "jetway.push."}
	PushLatest  = PushStore{Stream: "jetway_push_latest", Prefix: "jetway.pushl."}
)

// Subject is the subject of a message to a topic: kind "all", "app" or
// "dev"; app and id as the kind needs them; key names the value a
// latest_only topic keeps the newest of ("" for "_").
func (p PushStore) Subject(topic, kind, app, id, key string) string {
	return p.TopicPrefix(topic) + kind + "." + PushToken(app) + "." + PushToken(id) + "." + PushToken(key)
}

// TopicPrefix starts every subject of a topic's messages.
func (p PushStore) TopicPrefix(topic string) string { return p.Prefix + PoolToken(topic) + "." }

// PushToken is an id as one subject token: itself when it is letters,
// digits, '_' and '-' (at most 64, not "_"), "_" when empty, otherwise
// '~' and its base64url. Injective: a plain token never starts with '~'.
func PushToken(s string) string {
	if s == "" {
		return "_"
	}
	if len(s) <= 64 && s != "_" && plainToken.MatchString(s) {
		return s
	}
	return "~" + base64.RawURLEncoding.EncodeToString([]byte(s))
}

// PushUntoken is PushToken's inverse ("" for "_"); ok is false for a
// token PushToken never makes.
func PushUntoken(t string) (string, bool) {
	switch {
	case t == "_":
		return "", true
	case strings.HasPrefix(t, "~"):
		b, err := base64.RawURLEncoding.DecodeString(t[1:])
		return string(b), err == nil
	}
	return t, plainToken.MatchString(t)
}

var plainToken = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// Async jobs (workers/jobs.go, edge/async.go). A job is an API call kept
// in StreamJobs on
//
//	jetway.jobs.<pool token>.<tier>.<api>
//
// (tier: api, sandbox or draft; JobSubject), taken by its pool's workers
// from one durable consumer per pool (JobConsumer), whose filter is the
// pool's own subjects: a worker's user may create and read only its
// pools' consumers, so a compromised worker of one pool never sees
// another's jobs. The pool is the first token so that the create
// subject, which names the filter, can be allowed per pool.
// BucketJobs keeps each job's status (JobStatus) under its id, written
// by the edge when it accepts the job and by the worker that runs it.
// StreamDeadLetters keeps the jobs that ended without success, on
// jetway.dlq.<pool token>.<tier>.<api>.
const (
	StreamJobs        = "jetway_jobs"
	JobsPrefix        = "jetway.jobs."
	BucketJobs        = "jetway_job_status"
	StreamDeadLetters = "jetway_dlq"
	DeadLetterPrefix  = "jetway.dlq."
	// StreamJobResults keeps the results larger than an API's
	// max_result, one message each on jetway.results.<job id>.<attempt>
	// (JobResultSubject): a pool's workers write their own pool's (the job
	// id starts with the pool's token), edges read.
	StreamJobResults = "jetway_job_results"
	JobResultPrefix  = "jetway.results."
)

// JobResultSubject is the subject of a stored result of a job's attempt.
func JobResultSubject(id string, attempt int) string {
	return JobResultPrefix + id + "." + strconv.Itoa(attempt)
}

// Job tiers: the token after the pool in a job's subject.
const (
	TierAPI     = "api"
	TierSandbox = "sandbox"
	TierDraft   = "draft"
	// TierCallback carries a finished job's callback to its pool's
	// workers: jetway.jobs.<pool>.callback.<api>.
	TierCallback = "callback"
)

// JobSubject is the subject of a job of an API tier of a pool.
func JobSubject(pool, tier, api string) string {
	return JobsPrefix + PoolToken(pool) + "." + tier + "." + api
}

// DeadLetterSubject is the subject of a dead letter of an API tier.
func DeadLetterSubject(pool, tier, api string) string {
	return DeadLetterPrefix + PoolToken(pool) + "." + tier + "." + api
}

// ParseJobSubject splits a job subject (or a dead letter's) into its
// pool token, tier and API name; ok is false for anything else.
func ParseJobSubject(subject string) (poolToken, tier, api string, ok bool) {
	rest, found := strings.CutPrefix(subject, JobsPrefix)
	if !found {
		if rest, found = strings.CutPrefix(subject, DeadLetterPrefix); !found {
			return "", "", "", false
		}
	}
	poolToken, rest, _ = strings.Cut(rest, ".")
	tier, api, _ = strings.Cut(rest, ".")
	switch tier {
	case TierAPI, TierSandbox, TierDraft, TierCallback:
	default:
		return "", "", "", false
	}
	return poolToken, tier, api, poolToken != "" && ValidName(api) == nil
}

// JobConsumer is the durable consumer a pool's workers take its jobs
// from; its filter is JobsPrefix + PoolToken(pool) + ".>".
func JobConsumer(pool string) string { return "jobs_" + PoolToken(pool) }

// JobKeyPrefix starts the key of a job's status in BucketJobs: j.<id>,
// where the id is <pool token>.<random> (so the key is two tokens after
// the prefix, the first the pool's).
const JobKeyPrefix = "j."

// JobStatusSubject is the subject a job's status is written on (a KV
// write of BucketJobs): an edge follows a job's changes there.
func JobStatusSubject(id string) string { return "$KV." + BucketJobs + "." + JobKeyPrefix + id }

// Headers of a job's message: its id (the key of its status), and the
// caller's callback URL with the key its callbacks are signed with
// (sign.CallbackKey). In the wire's reserved namespace, so a caller can
// set none of them and none reaches a backend.
const (
	HdrJobID       = "Jetway-Job"
	HdrCallbackURL = "Jetway-Callback-Url"
	HdrCallbackKey = "Jetway-Callback-Key"
	// HdrJobUser names the user (a token's subject) whose job it is,
	// when the caller came with a token.
	HdrJobUser = "Jetway-Job-User"
	// HdrCallbackSubject names the NATS subject a callback message is
	// for (an API's destination), in place of HdrCallbackURL.
	HdrCallbackSubject = "Jetway-Callback-Subject"
	// HdrJobStatus carries the pending status its edge wrote before it
	// published the job (FormatJobStatus): its revision and the time of
	// submission. A worker that gets the job first writes "running" at
	// that revision without reading the status: one read less a job.
	HdrJobStatus = "Jetway-Job-Status"
)

// FormatJobStatus is HdrJobStatus's value: the status's revision and the
// submission time in Unix nanoseconds, separated by a space.
func FormatJobStatus(rev uint64, submitted time.Time) string {
	return strconv.FormatUint(rev, 10) + " " + strconv.FormatInt(submitted.UnixNano(), 10)
}

// ParseJobStatus reads HdrJobStatus's value (ok false when it is absent
// or malformed: the status is to be read).
func ParseJobStatus(v string) (rev uint64, submitted time.Time, ok bool) {
	r, at, found := strings.Cut(v, " ")
	if !found {
		return 0, time.Time{}, false
	}
	rev, err := strconv.ParseUint(r, 10, 64)
	if err != nil || rev == 0 {
		return 0, time.Time{}, false
	}
	ns, err := strconv.ParseInt(at, 10, 64)
	if err != nil || ns <= 0 {
		return 0, time.Time{}, false
	}
	return rev, time.Unix(0, ns).UTC(), true
}

// NonceBucketDeleted is the JetStream advisory of the nonce bucket's stream
// deleted: the admin node re-creates it, edges then refuse requests signed
// before (their nonces went with it).
const NonceBucketDeleted = "$JS.EVENT.ADVISORY.STREAM.DELETED.KV_" + BucketNonces

// BreakerSubject is the subject of the breaker changes of an API of a pool.
func BreakerSubject(pool, api string) string { return BreakerPrefix + PoolToken(pool) + "." + api }

// PoolToken is a pool name as one subject token: its dots become ':', a
// character no name may hold, so that pool "a" can never claim the subjects
// of pool "a.b" (jetway.breaker.a.> does not match jetway.breaker.a:b.x).
func PoolToken(pool string) string { return strings.ReplaceAll(pool, ".", ":") }

// MaxNameLen bounds API and pool names; they become NATS subject tokens and
// KV keys, and show up in metrics labels.
const MaxNameLen = 128

// namePattern admits dot-separated tokens of letters, digits, '_' and '-'.
// It can never produce a NATS wildcard ('*', '>'), whitespace, an empty
// token or a leading/trailing dot.
var namePattern = regexp.MustCompile(`^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$`)

// ValidName reports whether s may be used as an API or pool name.
func ValidName(s string) error {
	if s == "" {
		return fmt.Errorf("must not be empty")
	}
	if len(s) > MaxNameLen {
		return fmt.Errorf("must be at most %d characters", MaxNameLen)
	}
	if !namePattern.MatchString(s) {
		return fmt.Errorf("must be dot-separated tokens of letters, digits, '_' and '-' (got %q)", s)
	}
	return nil
}

// APISubject is the subject an API's requests are published on:
// jetway.api.<pool token>.<api>. The pool is in the subject so that a
// worker's NATS user can be allowed to hear its own pools' calls only (a
// compromised worker of one pool cannot take another pool's calls, bodies
// and callers included). Names must have passed ValidName.
func APISubject(pool, api string) string { return APIPrefix + PoolToken(pool) + "." + api }

// SandboxSubject is the subject of the calls to an API's sandbox tier,
// jetway.sandbox.<pool token>.<api> with the tier's own pool: a subject
// space of its own, so sandbox traffic never reaches a production
// subscription.
func SandboxSubject(pool, api string) string { return SandboxPrefix + PoolToken(pool) + "." + api }

// QueueGroup is the queue group of a pool's workers.
func QueueGroup(pool string) string { return QueuePrefix + pool }

// ChannelOutcomeSubject is the subject of an API's late outcome reports.
func ChannelOutcomeSubject(pool, api string) string {
	return ChannelOutcomePrefix + PoolToken(pool) + "." + api
}
