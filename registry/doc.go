// Package registry holds Jetway's registry: typed entries stored in
// JetStream KV buckets, their validation, and the watcher that turns the
// buckets into immutable snapshots that the hot path reads without locks.
//
// Each kind of entry has its own bucket and file: API (api.go, jetway_apis;
// its governance settings in policy.go, its sandbox tier in sandbox.go),
// Degrade (degrade.go, jetway_flags), AlertRule (alert.go, jetway_alerts)
// and App (app.go, jetway_apps). ParseAPI and its siblings are the one
// place an entry is validated: against its JSON Schema (package schemas),
// then the checks a schema cannot express. Start reading there, then at
// Watcher (watch.go): it follows the buckets, keeps the last good revision
// of every key, and hands the edges and workers a new Snapshot on every
// change. Client (store.go, with publish.go, cas.go and inforce.go) is the
// CLI's side: writes are compare-and-set, and routes.go decides which API
// holds a contested route. nonces.go is the signed requests' replay store.
package registry
