//go:build !linux

package rawsys

import "os"

// Not reached: File uses the os.File methods where Enabled is false.
func writeFile(f *os.File, p []byte) (int, error)             { return f.Write(p) }
func readFileAt(f *os.File, p []byte, off int64) (int, error) { return f.ReadAt(p, off) }
