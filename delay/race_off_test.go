//go:build !race

package delay

const raceEnabled = false
