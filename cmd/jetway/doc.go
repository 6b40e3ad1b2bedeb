// Command jetway is the one binary of the Jetway API gateway: it runs an
// all-in-one node with embedded NATS (serve), edge nodes (edge) and worker
// pools (worker), and is the CLI that manages the registry (api, degrade,
// app, alert) and watches the cluster (nodes, top, metric).
//
// Start at main.go: run dispatches a command to its cmd function. node.go
// parses a node's flags and runs it: NATS (embedded or not), the registry
// watcher, the edge and workers, the heartbeats, the alert judge
// (alerts.go), the HTTP and admin listeners (admin.go), and the drain on a
// signal; demo.go holds serve --demo's APIs and backends. Each CLI command group has a file of its own (api.go,
// degrade.go, app.go, alertcmd.go, nodes.go, top.go, natsperms.go), sharing
// the flag helpers of cli.go. docs/cli.md is the reference.
package main
