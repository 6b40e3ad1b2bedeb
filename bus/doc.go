// Package bus holds everything Jetway nodes share about NATS: how to
// connect, how to embed a server, and the wire between edge and worker
// (subjects, queue groups and header names).
//
// Start with wire.go and codec.go: the Jetway-* header names and the one
// codec (EncodeRequest, DecodeRequest, EncodeReply, DecodeReply) that the
// edge, the workers and the fallback to another API use. subjects.go names
// every subject and queue group, errors.go the error codes callers see
// (docs/errors.md is tested against it), headername.go how HTTP headers
// that NATS would read as its own travel escaped, and auth.go the NATS
// permissions of each role. conn.go and embedded.go connect to NATS or
// start it in-process; heartbeat.go is how nodes find each other. The
// real-server test helpers are in bus/natstest.
package bus
