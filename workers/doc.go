// Package workers runs Jetway's worker pools: queue-group subscribers that
// take API requests off NATS, call the API's backend through a stack built
// from its registry entry, and reply.
//
// Each API's backend is an instance of its type's adapter (package backend
// and its folders, by the table in adapters.go), kept while the entry's
// backend spec is unchanged. The stack around it (newStack in worker.go)
// adds tracing, fallback, retry and breaker, one middleware each, built
// when the registry changes — never per request.
package workers
