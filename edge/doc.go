// Package edge is Jetway's HTTP front: it matches a request to an API from
// its in-memory copy of the registry, applies the edge policies, and turns
// the request into one NATS request on the API's subject. The edge never
// calls a backend itself.
//
// Start at Edge (edge.go): New builds it, Apply compiles each registry
// snapshot into a router that ServeHTTP swaps in atomically, and the
// per-route handler runs a request through the edge policies in order, then
// sends it and writes the reply. The policies live one per file: path.go
// (the canonical path), clientip.go (client address and IP rules), auth.go,
// jwt.go and jwtcache.go (apps, keys, tokens and signed requests),
// limits.go and cluster.go (rate limits, edge concurrency, the deadline,
// cluster-wide limits). framing.go and listener.go guard the connection
// before Go's HTTP server sees it; errors.go writes the gateway's errors,
// observe.go and trace.go the metrics, access log and spans.
package edge
