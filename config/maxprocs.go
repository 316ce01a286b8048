package config

import "fmt"

// MaxProcsLimit bounds server.maxProcs: far above any core count this
// server is meant for, low enough that a typo (an extra zero or two) is
// refused rather than run with thousands of Ps.
const MaxProcsLimit = 1024

// validateMaxProcs checks server.maxProcs: 0 (Go's default) or 1..1024.
func (c *Config) validateMaxProcs(v *validator) {
	if n := c.Server.MaxProcs; n < 0 || n > MaxProcsLimit {
		v.add(fmt.Sprintf("server.maxProcs must be between 0 and %d (got %d) [0 = Go's default: every core]", MaxProcsLimit, n))
	}
}
