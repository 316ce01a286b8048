//go:build linux

package segment

import (
	"os"
	"syscall"
	"time"
)

// rawSyncLimit is the longest fdatasync after which the next sync still
// skips the runtime (syncCurrent). A variable for tests.
var rawSyncLimit = 2 * time.Millisecond

// syncCurrent makes the current file's appends durable for Sync.
//
// Sync is the flushLevel 2 writer's wait before it answers a group. Through
// os.File.Sync the blocking call costs the writer its P: sysmon hands the
// P to another thread while the call blocks, and on return the writer
// queues on the global run queue behind the connections it just answered,
// so the next group starts late (flushLevel 2 publishing: +4–15 % msgs/s,
// −9–17 % server CPU per message with the raw call, BENCHMARKS.md). A raw
// fdatasync keeps the P. Files are only appended to, so fdatasync persists
// what fsync would: the data and the size that reaches it.
//
// The price is that the P, and any stop-the-world phase, waits for the call.
// So the raw call is used only while the device answers quickly: one call
// slower than rawSyncLimit (a stalling disk) sends the following ones
// through the runtime until one of them is fast again.
func (l *Log) syncCurrent() error {
	f, ok := l.cur.(*os.File)
	start := time.Now()
	var err error
	if !ok || l.slowSync {
		err = l.cur.Sync()
	} else {
		err = rawSync(f)
	}
	l.slowSync = time.Since(start) > rawSyncLimit
	return err
}

// rawSync is rawFdatasync; tests count its calls.
var rawSync = rawFdatasync

func rawFdatasync(f *os.File) error {
	fd := f.Fd()
	for {
		_, _, e := syscall.RawSyscall(syscall.SYS_FDATASYNC, fd, 0, 0)
		switch e {
		case 0:
			return nil
		case syscall.EINTR:
			continue
		default:
			return e
		}
	}
}
