//go:build race

package delay

// raceEnabled: the race detector slows the writer several times, so
// precision bounds are reported but not enforced.
const raceEnabled = true
