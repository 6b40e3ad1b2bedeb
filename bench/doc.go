// Package bench measures Jetway against its peers. It has no API: the
// in-process benchmarks are in bench_test.go (go test -bench . ./bench),
// the side-by-side run with wrk and nginx is run.sh, and the commands it
// starts are under cmd/. See README.md for the figures and how to reproduce
// them.
package bench
