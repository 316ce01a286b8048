package segment

import (
	"testing"
)

// Regression (found by cmd/smss-torture: a slave's binlog lacked the last
// blocks of a master binlog file, and its subscribers the messages in
// them): a reader that reached the end of what it saw committed of file 0
// moved on to file 1 as soon as file 1 existed, judging "file 0 is
// complete" from a newer committed position than the one it had read up
// to. Blocks the writer appended to file 0 in between, before it rolled,
// were skipped. Here the writer appends, rolls and writes file 1 while the
// reader delivers the last block it knows of.
func TestReaderDoesNotSkipBlocksCommittedBeforeRoll(t *testing.T) {
	l, err := Open(Options{Dir: t.TempDir(), Decode: testDecode, MaxFileSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	appendBlock := func(id int64) {
		t.Helper()
		if _, err := l.Append(testBlock(id, id, 8), []Mark{{EventID: id}}); err != nil {
			t.Fatal(err)
		}
		l.Commit()
	}
	appendBlock(1)
	r := l.NewReader(Position{})
	var got []int64
	raced := false
	for len(got) < 4 {
		n, _, err := r.Next(10, func(first, _ int64, _ []byte, _ Position) error {
			got = append(got, first)
			if first == 1 && !raced {
				// While the reader holds block 1, the writer finishes
				// file 0 with blocks 2 and 3, rolls, and commits block 4
				// in file 1.
				raced = true
				appendBlock(2)
				appendBlock(3)
				if err := l.Roll(); err != nil {
					t.Fatal(err)
				}
				appendBlock(4)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Fatalf("reader stopped after %v with blocks 1..4 committed", got)
		}
	}
	for i, id := range got {
		if id != int64(i+1) {
			t.Fatalf("reader delivered %v, want [1 2 3 4]", got)
		}
	}
}
