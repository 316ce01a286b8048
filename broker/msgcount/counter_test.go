package msgcount

import (
	"encoding/binary"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/smssmq/smss/codec"
	"github.com/smssmq/smss/segment"
)

const testBlock = 16 // bytes of every block of the test logs

// decodeFixed decodes the test logs' blocks: testBlock bytes, the eventId in
// the first 8.
func decodeFixed(buf []byte) (int64, int64, int, error) {
	if len(buf) < testBlock {
		return 0, 0, 0, codec.ErrIncomplete
	}
	id := int64(binary.LittleEndian.Uint64(buf))
	return id, id, testBlock, nil
}

// TestCounterViewConsistent: while the writer counts and commits groups the
// way broker's writer does (Add, then CommitQuiet) and rolls files, every
// view pairs a counted end with exactly the blocks before it, and is never
// behind the committed position read before it.
func TestCounterViewConsistent(t *testing.T) {
	for _, tc := range []struct {
		name     string
		perGroup int // blocks per group
		perFile  int // groups per file
		groups   int // (a roll fsyncs: keep files few)
	}{
		{"single blocks, one file", 1, 1 << 30, 5000},
		{"groups, rolls", 7, 20, 2000},
		{"a group per file", 3, 1, 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := segment.Open(segment.Options{Dir: t.TempDir(), Decode: decodeFixed})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			var c Counter
			if v := c.view(l); v.committed != (segment.Position{}) {
				t.Fatalf("empty counter's view ends at %v", v.committed)
			}
			var done atomic.Bool
			var wg sync.WaitGroup
			for r := 0; r < 2; r++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for !done.Load() {
						before := l.Committed()
						v := c.view(l)
						if v.committed.Less(before) {
							t.Errorf("view ends at %v, behind the committed %v read before it", v.committed, before)
							return
						}
						if v.committed.Offset == 0 {
							continue
						}
						s, ok := v.slot(v.committed.FileID)
						if !ok || s.from != 0 || s.n*testBlock != v.committed.Offset {
							t.Errorf("view ends at %v but counts %+v (in ring %v)", v.committed, s, ok)
							return
						}
					}
				}()
			}
			id := int64(1)
			buf := make([]byte, 0, tc.perGroup*testBlock)
			var marks []segment.Mark
			for g := 0; g < tc.groups && !t.Failed(); g++ {
				buf, marks = buf[:0], marks[:0]
				for i := 0; i < tc.perGroup; i++ {
					marks = append(marks, segment.Mark{EventID: id, Off: int64(len(buf))})
					buf = binary.LittleEndian.AppendUint64(buf, uint64(id))
					buf = append(buf, make([]byte, testBlock-8)...)
					id++
				}
				start := l.Position()
				if _, err := l.Append(buf, marks); err != nil {
					t.Fatal(err)
				}
				c.Add(start, int64(len(buf)), marks)
				close(l.CommitQuiet())
				if (g+1)%tc.perFile == 0 {
					if err := l.Roll(); err != nil {
						t.Fatal(err)
					}
				}
			}
			done.Store(true)
			wg.Wait()
			v := c.view(l)
			if v.committed != l.Committed() {
				t.Fatalf("at rest the view ends at %v, the log at %v", v.committed, l.Committed())
			}
		})
	}
}
