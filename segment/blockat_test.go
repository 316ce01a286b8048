package segment

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestBlockAt checks BlockAt and NextBlockFirst for every eventId of logs
// laid out in one file or many, with and without their indexes, and after
// the oldest files are gone.
func TestBlockAt(t *testing.T) {
	for _, tc := range []struct {
		name        string
		max         int64
		interval    int64
		group       int
		dropIndexes bool
		dropOldest  int // files removed as retention removes them
	}{
		{"one file", 1 << 20, 64, 3, false, 0},
		{"many files", 700, 64, 3, false, 0},
		{"many files without indexes", 700, 64, 1, true, 0},
		{"oldest files removed", 700, 64, 2, false, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l, err := Open(Options{Dir: dir, MaxFileSize: tc.max, IndexInterval: tc.interval, Decode: testDecode})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if first, ok, err := l.BlockAt(1); err != nil || ok {
				t.Fatalf("empty log: BlockAt(1) = %+v, %v, %v", first, ok, err)
			}
			lasts := fill(t, l, 120, tc.group)
			for i := 0; i < tc.dropOldest; i++ {
				if err := l.RemoveFile(l.Files()[0]); err != nil {
					t.Fatal(err)
				}
			}
			if tc.dropIndexes {
				idx, _ := filepath.Glob(filepath.Join(dir, "*.idx"))
				for _, p := range idx {
					os.Remove(p)
				}
			}
			oldest, ok, err := l.FirstEventID()
			if err != nil || !ok {
				t.Fatalf("FirstEventID: %v %v", ok, err)
			}
			// The blocks as the log holds them, from a plain read.
			type want struct {
				first, last int64
				raw         []byte
				pos         Position
			}
			var blocks []want
			rd := l.NewReader(Position{FileID: l.Files()[0]})
			for {
				n, _, err := rd.Next(100, func(first, last int64, b []byte, next Position) error {
					blocks = append(blocks, want{first, last, append([]byte(nil), b...), Position{FileID: next.FileID, Offset: next.Offset - int64(len(b))}})
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				if n == 0 && rd.Pos() == l.Committed() {
					break
				}
			}
			rd.Close()
			if blocks[0].first != oldest || blocks[len(blocks)-1].last != lasts[len(lasts)-1] {
				t.Fatalf("read %d..%d, want %d..%d", blocks[0].first, blocks[len(blocks)-1].last, oldest, lasts[len(lasts)-1])
			}
			for id := int64(0); id <= lasts[len(lasts)-1]+2; id++ {
				k := 0 // the block holding id, or the oldest
				for k+1 < len(blocks) && blocks[k+1].first <= id {
					k++
				}
				got, ok, err := l.BlockAt(id)
				if err != nil || !ok {
					t.Fatalf("BlockAt(%d): %v %v", id, ok, err)
				}
				w := blocks[k]
				prev := int64(0)
				if k > 0 {
					prev = blocks[k-1].first
				}
				if got.First != w.first || got.Last != w.last || got.Pos != w.pos || !bytes.Equal(got.Raw, w.raw) || got.PrevFirst != prev {
					t.Fatalf("BlockAt(%d) = %d..%d at %v prev %d; want %d..%d at %v prev %d", id, got.First, got.Last, got.Pos, got.PrevFirst, w.first, w.last, w.pos, prev)
				}
			}
			for k, w := range blocks {
				next, ok, err := l.NextBlockFirst(w.first)
				if err != nil {
					t.Fatalf("NextBlockFirst(%d): %v", w.first, err)
				}
				if k == len(blocks)-1 {
					if ok {
						t.Fatalf("NextBlockFirst(%d) = %d after the last block", w.first, next)
					}
					continue
				}
				if !ok || next != blocks[k+1].first {
					t.Fatalf("NextBlockFirst(%d) = %d %v, want %d", w.first, next, ok, blocks[k+1].first)
				}
			}
		})
	}
}
