package segment

import (
	"errors"
	"os"
	"testing"
)

// blockEnds lists the end offsets of the blocks of file id, by scanning.
func blockEnds(t *testing.T, l *Log, id int64) []int64 {
	t.Helper()
	var ends []int64
	if _, err := l.scan(id, 0, -1, func(off, _, _ int64, b []byte) error {
		ends = append(ends, off+int64(len(b)))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return ends
}

func TestCountBlocks(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(Options{Dir: dir, MaxFileSize: 1 << 20, Decode: testDecode})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	fill(t, l, 40, 3)
	ends := blockEnds(t, l, 0)
	if len(ends) != 40 {
		t.Fatalf("%d blocks written, want 40", len(ends))
	}
	view, err := Open(Options{Dir: dir, Decode: testDecode, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer view.Close()
	for _, tc := range []struct {
		name      string
		from, to  int64
		blocks    int64
		wantFirst int64
	}{
		{"whole file", 0, ends[39], 40, 1},
		{"empty range", ends[4], ends[4], 0, 0},
		{"one block", 0, ends[0], 1, 1},
		{"a middle part", ends[9], ends[19], 10, -1},
		{"the tail", ends[29], ends[39], 10, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, lg := range []*Log{l, view} {
				c, err := lg.CountBlocks(0, tc.from, tc.to, nil)
				if err != nil {
					t.Fatal(err)
				}
				if c.Blocks != tc.blocks {
					t.Fatalf("%d blocks, want %d", c.Blocks, tc.blocks)
				}
				if tc.wantFirst >= 0 && c.FirstEventID != tc.wantFirst {
					t.Fatalf("first eventId %d, want %d", c.FirstEventID, tc.wantFirst)
				}
				if tc.blocks > 0 && c.FirstEventID <= 0 {
					t.Fatalf("first eventId %d of a non-empty range", c.FirstEventID)
				}
			}
		})
	}
	if first, ok, err := view.FileFirstEventID(0); err != nil || !ok || first != 1 {
		t.Fatalf("first eventId of file 0: %d %v %v", first, ok, err)
	}

	t.Run("not a block boundary", func(t *testing.T) {
		var ce *CorruptError
		if _, err := view.CountBlocks(0, 0, ends[3]+1, nil); !errors.As(err, &ce) {
			t.Fatalf("count to inside a block: %v, want a CorruptError", err)
		}
	})
	t.Run("reversed range", func(t *testing.T) {
		if _, err := view.CountBlocks(0, ends[3], ends[2], nil); err == nil {
			t.Fatal("a reversed range was counted")
		}
	})
	t.Run("missing file", func(t *testing.T) {
		if _, err := view.CountBlocks(7, 0, 100, nil); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("count of a missing file: %v", err)
		}
	})
}

// TestCountBlocksCheck: the check function runs while a large file is
// counted, and its error ends the count at once.
func TestCountBlocksCheck(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(Options{Dir: dir, MaxFileSize: 1 << 30, Decode: testDecode})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var data []byte
	var marks []Mark
	const n = 4000
	for i := 0; i < n; i++ {
		marks = append(marks, Mark{EventID: int64(i + 1), Off: int64(len(data))})
		data = append(data, testBlock(int64(i+1), int64(i+1), 1000)...)
	}
	appendGroup(t, l, data, marks)
	size := int64(len(data))

	var offs []int64
	c, err := l.CountBlocks(0, 0, size, func(off int64) error {
		offs = append(offs, off)
		return nil
	})
	if err != nil || c.Blocks != n {
		t.Fatalf("count %+v %v, want %d blocks", c, err, n)
	}
	if want := size / CountCheckEvery; int64(len(offs)) < want-1 || int64(len(offs)) > want+1 {
		t.Fatalf("check called %d times over %d bytes, want about %d", len(offs), size, want)
	}

	stop := errors.New("stop now")
	calls := 0
	if _, err := l.CountBlocks(0, 0, size, func(int64) error {
		calls++
		return stop
	}); !errors.Is(err, stop) || calls != 1 {
		t.Fatalf("stopped count: %v after %d checks, want the check's error after 1", err, calls)
	}
}
