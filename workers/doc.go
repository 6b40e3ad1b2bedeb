// Package workers runs Jetway's worker pools: queue-group subscribers that
// take API requests off NATS, call the API's backend through a stack built
// from its registry entry, and reply.
//
// Each API's backend is an instance of its type's adapter (package backend
// and its folders, by the table in adapters.go), kept while the entry's
// backend spec is unchanged. The stack around it (newStack in worker.go)
// adds tracing, fallback, retry and breaker, one middleware each, built
// when the registry changes — never per request.
//
// Start at Worker (worker.go): New builds it, Apply subscribes to the
// subjects of the APIs of its pools and builds each API's stack, and each
// message is dispatched to a goroutine bounded by the API's concurrency,
// decoded with package bus's codec, served and replied to. governance.go
// holds the breaker, retry and fallback middlewares; trace.go the spans.
package workers
