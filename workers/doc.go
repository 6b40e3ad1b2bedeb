// Package workers runs Jetway's worker pools: queue-group subscribers that
// take API requests off NATS, call the API's backend through a pipeline
// built from its registry entry, and reply.
//
// The pipeline follows lura's shape: a Backend is a function from request to
// response, a Middleware wraps one, and each API gets one stack built from
// its definition when the registry changes — never per request.
//
// Start at Worker (worker.go): New builds it, Apply subscribes to the
// subjects of the APIs of its pools and builds each API's stack, and each
// message is dispatched to a goroutine bounded by the API's concurrency,
// decoded with package bus's codec, served and replied to. pipeline.go
// defines Request, Response, Backend and Middleware; httpbackend.go and
// mock.go are the two backend types; governance.go wraps a backend in the
// API's breaker, retries and fallbacks; trace.go adds the spans.
package workers
