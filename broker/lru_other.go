//go:build !unix

package broker

// softFileLimit: no descriptor limit to read here; DefaultMaxOpenTopics
// falls back to its fixed default.
func softFileLimit() (uint64, bool) { return 0, false }
