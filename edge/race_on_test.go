//go:build race

package edge

// raceEnabled: the race detector slows everything several times, so
// tests that measure rates under load skip their figures.
const raceEnabled = true
