// Package lint pins the linter CI runs (golangci-lint, see .golangci.yml at
// the repository root) in a module of its own, so that its dependencies
// move neither the gateway's go.mod nor the other tools' versions:
//
//	go tool -modfile=tools/lint/go.mod golangci-lint run ./...
package lint
