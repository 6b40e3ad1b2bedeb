package bus

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// NATS roles of Jetway's processes, each a NATS user.
const (
	UserAdmin  = "admin"  // serve and the CLI: may write the registry
	UserEdge   = "edge"   // edges: read the registry, request APIs, claim nonces
	UserWorker = "worker" // workers: read the registry, serve APIs
)

// ResponseTTL is how long a worker may answer a request it received
// (NATS allow_responses): longer than any API's timeout (at most 5 min,
// registry.MaxTimeout).
const ResponseTTL = 6 * time.Minute

// kvRead are the subjects a JetStream client publishes to read and watch a
// KV bucket: its stream info, ordered consumers (create, info, delete),
// direct and API gets, and the watch's flow-control answers. Nothing here
// writes: a KV write is a publish on $KV.<bucket>.<key>.
func kvRead(bucket string) []string {
	return streamRead("KV_" + bucket)
}

// streamRead are the subjects a JetStream client publishes to read a
// stream: its info, ordered consumers, direct and API gets, flow control.
func streamRead(st string) []string {
	return []string{
		"$JS.API.STREAM.INFO." + st,
		"$JS.API.CONSUMER.CREATE." + st, "$JS.API.CONSUMER.CREATE." + st + ".>",
		"$JS.API.CONSUMER.INFO." + st + ".*", "$JS.API.CONSUMER.DELETE." + st + ".*",
		"$JS.API.DIRECT.GET." + st, "$JS.API.DIRECT.GET." + st + ".>",
		"$JS.API.STREAM.MSG.GET." + st,
		"$JS.FC." + st + ".>",
	}
}

// RolePermissions are the least-privilege permissions of a role, as allow
// lists of what it must publish and subscribe to (nil: everything, for the
// admin). Anything not listed is refused by the server with a permissions
// violation. The same lists serve an external cluster's configuration
// (`jetway nats-permissions`, deploy/nats/README.md).
//
// pools narrows a worker to the given pools: it may join only their queue
// groups and publish and hear only their breaker events, so a compromised
// worker of one pool cannot open the circuits of another. No pools means
// every pool (the embedded server's one worker user). pools is ignored for
// other roles. Pool names must have passed ValidName.
//
// Edges: request any API, exchange rate-limit reports, publish metrics, SLA records,
// alerts and their own heartbeats, read the APIs, flags, alert rules and
// apps (signing secrets included: edges check signatures) and claim
// nonces. Workers: answer the requests of their pools' APIs (only the
// reply subject of a request they received, once), call other APIs (an
// API's fallback), publish their pools' breaker events and their own
// heartbeats, and read the APIs and flags only — never the apps. Neither
// reads or writes the SLA report schedules (BucketReports: webhook URLs,
// mail settings, delivery records): only the admin's serve or admin node
// sends reports.
func RolePermissions(role string, pools ...string) *server.Permissions {
	switch role {
	case UserEdge:
		pub := []string{
			APIPrefix + ">", SandboxPrefix + ">",
			RateLimitSubject, PushCensusSubject,
			MetricsPrefix + UserEdge + ".*",
			SLAPrefix + "*", // its per-minute SLA records (a JetStream publish: the ack comes to its inbox)
			AlertPrefix + ">",
			HeartbeatPrefix + UserEdge + ".*",
			SiteEventSubject,               // its calls moved to another NATS cluster
			ChannelOutcomePrefix + ">",     // late outcomes of channel calls, for the API's pool
			"$KV." + BucketNonces + ".>",   // claim a nonce (KV create)
			"$KV." + BucketACME + ".>",     // store what ACME obtained, for every edge
			"$KV." + BucketCache + ".>",    // keep an answer for every edge (cache.shared)
			"$KV." + BucketPushAcks + ".>", // a push client's ack (KV create, update)
		}
		for _, b := range []string{BucketAPIs, BucketFlags, BucketAlerts, BucketApps, BucketNonces, BucketCerts, BucketACME, BucketJSONSchemas, BucketTopics, BucketPushAcks} {
			pub = append(pub, kvRead(b)...)
		}
		// Push: publish a topic's messages (a JetStream publish: its ack
		// comes to the inbox), follow them with one ordered consumer per
		// topic, and replay what a client missed with direct gets.
		for _, p := range []PushStore{PushDurable, PushLatest} {
			pub = append(pub, p.Prefix+">", "$JS.API.CONSUMER.MSG.NEXT."+p.Stream+".*")
			pub = append(pub, streamRead(p.Stream)...)
		}
		// Groups (push/group.go): a durable consumer per app and group on
		// the durable stream, whose messages the edge acks, nacks and
		// terminates for its clients.
		pub = append(pub, "$JS.ACK."+PushDurable.Stream+".>")
		// The shared cache is read by direct gets only: no consumers.
		pub = append(pub, "$JS.API.STREAM.INFO.KV_"+BucketCache, "$JS.API.DIRECT.GET.KV_"+BucketCache+".>")
		// Async jobs: store a job (a JetStream publish; the callers'
		// tiers only, never a callback message, which a worker would
		// deliver), create its status and read it back for its caller with
		// direct gets (edge/async.go), and read a stored result.
		for _, tier := range []string{TierAPI, TierSandbox, TierDraft} {
			pub = append(pub, JobsPrefix+"*."+tier+".>")
		}
		pub = append(pub, "$KV."+BucketJobs+"."+JobKeyPrefix+"*.*",
			"$JS.API.DIRECT.GET.KV_"+BucketJobs+".$KV."+BucketJobs+"."+JobKeyPrefix+"*.*",
			"$JS.API.DIRECT.GET."+StreamJobResults+"."+JobResultPrefix+">")
		// The queues' depth and age and the dead letters' counts, for
		// metrics and alerts (registry.ReadJobQueues): stream infos, and
		// a get of each tier's oldest job (whose request the edge wrote).
		pub = append(pub, "$JS.API.STREAM.INFO."+StreamJobs, "$JS.API.STREAM.INFO."+StreamDeadLetters, "$JS.API.DIRECT.GET."+StreamJobs)
		sub := []string{
			InboxPrefixEdge + ".>",
			RateLimitSubject,
			MetricsPrefix + ">", BreakerPrefix + ">", SiteEventSubject, ChannelEventPrefix + ">", // the alerts' inputs
			MetricsQuerySubject, PushQuerySubject, PushCensusSubject,
			HeartbeatPrefix + ">",
			// The nonce bucket deleted: the edge refuses requests signed
			// before, whose nonces went with it (registry.NonceStore).
			NonceBucketDeleted,
			CachePurgeSubject,
			// A job's status changes, for its event stream (edge/async.go):
			// a job id is two tokens, its pool's and its own.
			"$KV." + BucketJobs + "." + JobKeyPrefix + "*.*",
		}
		return &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: pub},
			Subscribe: &server.SubjectPermission{Allow: sub},
			// The answer to a metrics query goes to the asker's inbox.
			Response: &server.ResponsePermission{MaxMsgs: 1, Expires: time.Minute},
		}
	case UserWorker:
		pub := []string{
			APIPrefix + ">",     // a fallback calls another API
			ServicePrefix + ">", // backends of type nats
			// A stream's messages, to the edge inbox its request named
			// (a random token: bus/stream.go).
			StreamInboxPrefix + ".*",
			HeartbeatPrefix + UserWorker + ".*",
		}
		for _, b := range []string{BucketAPIs, BucketFlags, BucketSchemas} {
			pub = append(pub, kvRead(b)...)
		}
		pub = append(pub, SecretRead(pools...)...) // its pools' own secrets only
		// Async jobs: its pools' own job consumers, statuses, results,
		// callbacks and dead letters (jobs).
		pub = append(pub, jobs(pools...)...)
		// Its own inbox only: the pool set's, or every worker's for a user
		// of every pool.
		sub := []string{InboxPrefix(UserWorker, pools...) + ".>", HeartbeatPrefix + ">"}
		// The NATS services protocol under Jetway's service name (`nats
		// micro ls`); the answer goes to the asker's inbox.
		sub = append(sub, ServiceSubjects()...)
		if len(pools) == 0 {
			pub = append(pub, BreakerPrefix+">")
			sub = append(sub, APIPrefix+"*.> "+QueuePrefix+">", SandboxPrefix+"*.> "+QueuePrefix+">", BreakerPrefix+">")
		}
		// Channel sets (workers/channels.go): its pools' outcome reports,
		// the states and leases of their controllers, and a watch of
		// its pools' keys of the channels bucket.
		pub = append(pub, channels(pools...)...)
		sub = append(sub, channelReports(pools...)...)
		for _, p := range pools {
			breakers := BreakerPrefix + PoolToken(p) + ".>"
			pub = append(pub, breakers)
			// Its pools' calls only: the pool is in the API subject.
			tok := PoolToken(p) + ".>"
			sub = append(sub, APIPrefix+tok+" "+QueueGroup(p), SandboxPrefix+tok+" "+QueueGroup(p), breakers)
		}
		return &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: pub},
			Subscribe: &server.SubjectPermission{Allow: sub},
			Response:  &server.ResponsePermission{MaxMsgs: 1, Expires: ResponseTTL},
		}
	case UserAdmin:
		return nil
	}
	// An unknown role may do nothing, rather than everything.
	none := &server.SubjectPermission{Deny: []string{">"}}
	return &server.Permissions{Publish: none, Subscribe: none}
}

// jobs are the subjects a worker of pools publishes to take its pools'
// jobs (every pool's: none given): create and read the pool's durable
// consumer — the create subject names the filter, which must be the
// pool's own subjects — pull its messages and ack them; read and write
// its pools' job statuses one key at a time (a direct get, a publish: no
// stream info, no consumer, so no other pool's is listed or read); store
// its results and callback messages; write its dead letters.
func jobs(pools ...string) []string {
	const api = "$JS.API.CONSUMER."
	toks := []string{"*"}
	if len(pools) > 0 {
		toks = toks[:0]
		for _, p := range pools {
			toks = append(toks, PoolToken(p))
		}
	}
	var out []string
	for _, tok := range toks {
		c := "*"
		if tok != "*" {
			c = "jobs_" + tok
		}
		status := "$KV." + BucketJobs + "." + JobKeyPrefix + tok + ".*"
		out = append(out,
			api+"CREATE."+StreamJobs+"."+c+"."+JobsPrefix+tok+".>",
			api+"INFO."+StreamJobs+"."+c,
			api+"MSG.NEXT."+StreamJobs+"."+c,
			"$JS.ACK."+StreamJobs+"."+c+".>",
			status, "$JS.API.DIRECT.GET.KV_"+BucketJobs+"."+status,
			JobResultPrefix+tok+".>",
			JobsPrefix+tok+"."+TierCallback+".>",
			DeadLetterPrefix+tok+".>",
		)
	}
	return out
}

// channels are the subjects a worker of pools (every pool's: none given)
// publishes for its pools' channel sets: outcome reports and events,
// writes of controller states and leases (never the operators'
// overrides), and the reads of those pools' keys — direct gets and a
// watch whose filter names the pool.
func channels(pools ...string) []string {
	var out []string
	for _, tok := range PoolTokens(pools) {
		kv := "$KV." + BucketChannels + "."
		out = append(out,
			ChannelReportPrefix+tok+".>", ChannelEventPrefix+tok+".>",
			kv+"state."+tok+".>", kv+"lease."+tok+".>",
			"$JS.API.DIRECT.GET.KV_"+BucketChannels+"."+kv+"*."+tok+".>",
			"$JS.API.CONSUMER.CREATE.KV_"+BucketChannels+".*."+kv+"*."+tok+".>",
		)
	}
	return append(out,
		"$JS.API.STREAM.INFO.KV_"+BucketChannels,
		"$JS.API.CONSUMER.DELETE.KV_"+BucketChannels+".*",
		"$JS.FC.KV_"+BucketChannels+".>",
	)
}

// channelReports are the outcome reports a worker of pools hears: its
// pool members' and the edges' late ones.
func channelReports(pools ...string) []string {
	var out []string
	for _, tok := range PoolTokens(pools) {
		out = append(out, ChannelReportPrefix+tok+".>", ChannelOutcomePrefix+tok+".>")
	}
	return out
}

// PoolTokens are the subject tokens of pools ("*" for every pool: none
// given).
func PoolTokens(pools []string) []string {
	if len(pools) == 0 {
		return []string{"*"}
	}
	out := make([]string, 0, len(pools))
	for _, p := range pools {
		out = append(out, PoolToken(p))
	}
	return out
}

// Credentials are the passwords of the three roles on the embedded server.
type Credentials map[string]string

// LoadOrCreateCredentials reads the role passwords from path, or makes
// random ones and writes them there (mode 0600) when the file is missing.
func LoadOrCreateCredentials(path string) (Credentials, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		var c Credentials
		if err := json.Unmarshal(b, &c); err != nil || c[UserAdmin] == "" || c[UserEdge] == "" || c[UserWorker] == "" {
			return nil, fmt.Errorf("credentials file %s is damaged: delete it to make new ones", path)
		}
		return c, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	c := Credentials{}
	for _, u := range []string{UserAdmin, UserEdge, UserWorker} {
		var r [24]byte
		if _, err := rand.Read(r[:]); err != nil {
			return nil, err
		}
		c[u] = base64.RawURLEncoding.EncodeToString(r[:])
	}
	b, _ = json.MarshalIndent(c, "", "  ")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return nil, fmt.Errorf("writing %s: %w", path, err)
	}
	return c, nil
}

// users are the server users of the credentials.
func (c Credentials) users() []*server.User {
	var out []*server.User
	for _, u := range []string{UserAdmin, UserEdge, UserWorker} {
		out = append(out, &server.User{Username: u, Password: c[u], Permissions: RolePermissions(u)})
	}
	return out
}

// PermissionsConfig writes RolePermissions(role, pools...) as the
// permissions block of a user in a nats-server configuration file, for
// external clusters: one user per role, and per pool for workers.
func PermissionsConfig(role string, pools ...string) (string, error) {
	switch role {
	case UserAdmin:
		return "", fmt.Errorf("the admin user has every permission: give it no permissions block")
	case UserEdge:
		if len(pools) > 0 {
			return "", fmt.Errorf("pools narrow only the worker role")
		}
	case UserWorker:
		for _, p := range pools {
			if err := ValidName(p); err != nil {
				return "", fmt.Errorf("pool %q: %w", p, err)
			}
		}
	default:
		return "", fmt.Errorf("unknown role %q (edge or worker)", role)
	}
	p := RolePermissions(role, pools...)
	var b strings.Builder
	list := func(name string, subjects []string) {
		fmt.Fprintf(&b, "  %s: { allow: [\n", name)
		for _, s := range subjects {
			fmt.Fprintf(&b, "    %q\n", s)
		}
		b.WriteString("  ] }\n")
	}
	b.WriteString("permissions: {\n")
	list("publish", p.Publish.Allow)
	list("subscribe", p.Subscribe.Allow)
	if r := p.Response; r != nil {
		fmt.Fprintf(&b, "  allow_responses: { max: %d, expires: %q }\n", r.MaxMsgs, r.Expires.String())
	}
	b.WriteString("}\n")
	return b.String(), nil
}
