package main

import (
	"io/fs"
	"syscall"
)

// childProcAttr makes a started server die with the benchmark even if the
// benchmark is killed outright.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// allocatedBytes is the disk space a file takes (its blocks), which is what
// the disk-bytes-per-message figure compares.
func allocatedBytes(info fs.FileInfo) int64 {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return info.Size()
}
