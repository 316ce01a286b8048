//go:build !linux

package broker

// statfsFree is not implemented here: the guard logs that it cannot read
// the free space and never refuses a write.
func statfsFree(string) (uint64, error) { return 0, errNoStatfs }

func allocate(string, int64) error { return errNoStatfs }
