//go:build !linux

package main

import (
	"io/fs"
	"syscall"
)

// childProcAttr: no parent-death signal outside Linux; the benchmark stops
// its servers on its way out (env.stop), not when it is killed outright.
func childProcAttr() *syscall.SysProcAttr { return nil }

// allocatedBytes falls back to the file size where blocks are not known.
func allocatedBytes(info fs.FileInfo) int64 { return info.Size() }
