package rawsys

import (
	"os"
	"time"
)

// SlowCall is the longest raw call on a file after which the next ones on
// that file go through the runtime (File). A variable for tests.
var SlowCall = 2 * time.Millisecond

// File makes the writes and positioned reads of one regular file raw
// while they are fast: a call slower than SlowCall sends the following
// calls through the runtime (which lets the P go while they block), until
// one of them is fast again. Its zero value is ready; one goroutine at a
// time uses it, the file's owner.
type File struct{ slow bool }

// Write writes all of p at the file's offset, as os.File.Write.
func (g *File) Write(f *os.File, p []byte) (n int, err error) {
	start := time.Now()
	if !Enabled || g.slow {
		n, err = f.Write(p)
	} else {
		n, err = writeFile(f, p)
	}
	g.slow = time.Since(start) > SlowCall
	return n, err
}

// ReadAt reads len(p) bytes at off, as os.File.ReadAt: fewer only with an
// error (io.EOF at the end of the file).
func (g *File) ReadAt(f *os.File, p []byte, off int64) (n int, err error) {
	start := time.Now()
	if !Enabled || g.slow {
		n, err = f.ReadAt(p, off)
	} else {
		n, err = readFileAt(f, p, off)
	}
	g.slow = time.Since(start) > SlowCall
	return n, err
}
