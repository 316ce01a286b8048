package segment

import (
	"bytes"
	"os"
	"testing"
)

// TestNewestBlock: the newest committed block of a log, whatever lies
// after it (an uncommitted append, an empty file, nothing).
func TestNewestBlock(t *testing.T) {
	for _, tc := range []struct {
		name string
		// build fills the log and returns the block NewestBlock must find
		// (nil for none) and the file holding it.
		build func(t *testing.T, l *Log) ([]byte, int64)
	}{
		{"empty log", func(t *testing.T, l *Log) ([]byte, int64) { return nil, 0 }},
		{"one file", func(t *testing.T, l *Log) ([]byte, int64) {
			appendGroup(t, l, append(testBlock(1, 1, 5), testBlock(2, 4, 9)...), []Mark{{1, 0}, {2, 25}})
			return testBlock(2, 4, 9), 0
		}},
		{"newest of several files", func(t *testing.T, l *Log) ([]byte, int64) {
			for id := int64(1); l.Position().FileID < 3; id++ {
				appendGroup(t, l, testBlock(id, id, 40), []Mark{{id, 0}})
			}
			// The roll left file 3 uncreated; file 2 holds the newest block.
			last := l.Committed()
			raw, err := l.LastBlock(last.FileID)
			if err != nil || raw == nil {
				t.Fatalf("LastBlock(%d): %v", last.FileID, err)
			}
			return raw, last.FileID
		}},
		{"uncommitted append is not visible", func(t *testing.T, l *Log) ([]byte, int64) {
			appendGroup(t, l, testBlock(1, 1, 5), []Mark{{1, 0}})
			if _, err := l.Append(testBlock(2, 2, 5), []Mark{{2, 0}}); err != nil {
				t.Fatal(err)
			}
			return testBlock(1, 1, 5), 0
		}},
		{"empty newest file", func(t *testing.T, l *Log) ([]byte, int64) {
			for id := int64(1); l.Position().FileID < 1; id++ {
				appendGroup(t, l, testBlock(id, id, 40), []Mark{{id, 0}})
			}
			want, err := l.LastBlock(0)
			if err != nil {
				t.Fatal(err)
			}
			// File 1 created by an append that was truncated away.
			if _, err := l.Append(testBlock(9, 9, 5), []Mark{{9, 0}}); err != nil {
				t.Fatal(err)
			}
			if err := l.Truncate(Position{FileID: 1}); err != nil {
				t.Fatal(err)
			}
			l.Commit()
			if st, err := os.Stat(l.Path(1)); err != nil || st.Size() != 0 {
				t.Fatalf("file 1: %v %v", st, err)
			}
			return want, 0
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := Open(Options{Dir: t.TempDir(), MaxFileSize: 100, Decode: testDecode})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			want, wantID := tc.build(t, l)
			got, id, err := l.NewestBlock()
			if err != nil || !bytes.Equal(got, want) || (want != nil && id != wantID) {
				t.Fatalf("NewestBlock = %x in file %d, %v; want %x in file %d", got, id, err, want, wantID)
			}
		})
	}
}
