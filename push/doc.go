// Package push delivers a topic's messages to connected clients over
// Server-Sent Events and WebSocket, with one cursor semantics: a client
// that comes back — to this edge or another, minutes or hours later — gets
// everything after its cursor, in order, then live messages, with no hole
// and no duplicate, or an explicit gap.
//
// Every topic's messages are kept in one JetStream stream (bus.StreamPush).
// An edge follows each topic some client of it subscribed to with one
// ordered consumer (a hub) and fans its messages out to the subscribers'
// bounded queues; what a client missed — before it connected, or while it
// read too slowly for its queue — is read with batched direct gets, so a
// connection never costs a JetStream consumer.
//
// The edge authenticates the caller and checks its grants (edge/push.go);
// this package is handed the topic and the caller, and never writes an
// HTTP error of its own making except through the edge's writer.
package push
