// Package push delivers a topic's messages to connected clients over
// Server-Sent Events and WebSocket, with one cursor semantics: a client
// that comes back — to this edge or another, minutes or hours later — gets
// everything after its cursor, in order, then live messages, with no hole
// and no duplicate, or an explicit gap.
//
// Topics' messages are kept in two JetStream streams (bus.PushDurable, and
// bus.PushLatest for latest_only topics).
// An edge follows each topic some client of it subscribed to with one
// ordered consumer (a hub) that keeps its live messages in one ring every
// subscriber reads at its own pace; what a client missed — before it
// connected, or while it was further behind than the ring — is read with
// batched direct gets, so a connection never costs a JetStream consumer.
//
// The edge authenticates the caller and checks its grants (edge/push.go);
// this package is handed the topic and the caller; Open's errors are the
// edge's to write, before any stream starts.
package push
