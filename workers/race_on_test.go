//go:build race

package workers_test

// raceEnabled: the race detector slows every test about tenfold.
const raceEnabled = true
