//go:build race

package replication

// raceEnabled skips throughput measurements, meaningless under -race.
const raceEnabled = true
