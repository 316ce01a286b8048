package segment

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/smssmq/smss/codec"
)

// A toy block format for the tests: u32 length of the rest, i64 first id,
// i64 last id, then filler.
func testBlock(first, last int64, filler int) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(16+filler))
	b = binary.LittleEndian.AppendUint64(b, uint64(first))
	b = binary.LittleEndian.AppendUint64(b, uint64(last))
	return append(b, make([]byte, filler)...)
}

func testDecode(buf []byte) (int64, int64, int, error) {
	if len(buf) < 4 {
		return 0, 0, 0, codec.ErrIncomplete
	}
	n := int(binary.LittleEndian.Uint32(buf))
	if n < 16 || n > 1<<20 {
		return 0, 0, 0, errors.New("bad length")
	}
	if len(buf) < 4+n {
		return 0, 0, 0, codec.ErrIncomplete
	}
	return int64(binary.LittleEndian.Uint64(buf[4:])), int64(binary.LittleEndian.Uint64(buf[12:])), 4 + n, nil
}

// appendGroup appends and commits one group as the writer does, rolling
// to a new file when the current one is full.
func appendGroup(t *testing.T, l *Log, data []byte, marks []Mark) {
	t.Helper()
	if _, err := l.Append(data, marks); err != nil {
		t.Fatal(err)
	}
	l.Commit()
	if l.Full() {
		if err := l.Roll(); err != nil {
			t.Fatal(err)
		}
	}
}

// fill appends blocks with ids 1..n (block i covers ids [first, first+k-1]
// with k = 1 + i%3) in groups of g blocks.
func fill(t *testing.T, l *Log, blocks, g int) (lasts []int64) {
	t.Helper()
	id := int64(1)
	for i := 0; i < blocks; {
		var data []byte
		var marks []Mark
		for j := 0; j < g && i < blocks; j, i = j+1, i+1 {
			k := int64(1 + i%3)
			marks = append(marks, Mark{EventID: id, Off: int64(len(data))})
			data = append(data, testBlock(id, id+k-1, 10+i%50)...)
			id += k
			lasts = append(lasts, id-1)
		}
		appendGroup(t, l, data, marks)
	}
	return lasts
}

func TestLocateAcrossFiles(t *testing.T) {
	for _, tc := range []struct {
		name     string
		max      int64
		interval int64
		group    int
	}{
		{"one file dense index", 1 << 20, 1, 1},
		{"one file sparse index", 1 << 20, 512, 7},
		{"many files", 700, 64, 3},
		{"tiny files", 60, 4096, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l, err := Open(Options{Dir: dir, MaxFileSize: tc.max, IndexInterval: tc.interval, Decode: testDecode})
			if err != nil {
				t.Fatal(err)
			}
			lasts := fill(t, l, 300, tc.group)
			check := func(l *Log) {
				for target := int64(0); target <= lasts[len(lasts)-1]+2; target++ {
					loc, err := l.Locate(target)
					if err != nil {
						t.Fatalf("locate %d: %v", target, err)
					}
					// The expected answer: first block whose first id > target.
					var got int64 = -1
					rd := l.NewReader(loc.Pos)
					rd.Next(1, func(first, _ int64, b []byte, next Position) error {
						// Only a block exactly at loc.Pos counts: the reader
						// would step past the end of a file.
						if (Position{FileID: next.FileID, Offset: next.Offset - int64(len(b))}) == loc.Pos {
							got = first
						}
						return nil
					})
					rd.Close()
					want := int64(-1)
					prev := int64(0)
					for i, last := range lasts {
						first := int64(1)
						if i > 0 {
							first = lasts[i-1] + 1
						}
						if first > target {
							want = first
							break
						}
						prev = last
					}
					if got != want {
						t.Fatalf("locate %d: block at %v has first %d, want %d", target, loc.Pos, got, want)
					}
					if target > 0 && loc.PrevLast != prev {
						t.Fatalf("locate %d: prevLast %d want %d", target, loc.PrevLast, prev)
					}
				}
			}
			check(l)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			// Corrupt every index: lookups must still be right.
			idx, _ := filepath.Glob(filepath.Join(dir, "*.idx"))
			for i, p := range idx {
				switch i % 3 {
				case 0:
					os.WriteFile(p, []byte("garbage!garbage!garbage!garbage!"), 0o644)
				case 1:
					os.Remove(p)
				case 2:
					os.WriteFile(p, appendEntry(nil, 5, 3), 0o644)
				}
			}
			l2, err := Open(Options{Dir: dir, MaxFileSize: tc.max, IndexInterval: tc.interval, Decode: testDecode})
			if err != nil {
				t.Fatal(err)
			}
			check(l2)
		})
	}
}

func TestAppendTruncateAndTorn(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(Options{Dir: dir, Decode: testDecode, IndexInterval: 1})
	if err != nil {
		t.Fatal(err)
	}
	fill(t, l, 10, 2)
	pos := l.Position()
	if _, err := l.Append(testBlock(100, 100, 5), []Mark{{EventID: 100}}); err != nil {
		t.Fatal(err)
	}
	if err := l.Truncate(pos); err != nil {
		t.Fatal(err)
	}
	if l.Position() != pos {
		t.Fatalf("position %v after truncate, want %v", l.Position(), pos)
	}
	l.Close()
	path := l.Path(0)
	// A torn block at the end is reported with its offset.
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.Write(testBlock(200, 200, 30)[:20])
	f.Close()
	l2, _ := Open(Options{Dir: dir, Decode: testDecode})
	end, err := l2.ScanTail(func(Position, int64, int64, []byte) error { return nil })
	var ce *CorruptError
	if !errors.As(err, &ce) || !ce.Torn() || ce.Offset != pos.Offset || end.Offset != pos.Offset {
		t.Fatalf("torn tail: end %v err %v", end, err)
	}
	if err := l2.TruncateTo(end); err != nil {
		t.Fatal(err)
	}
	if _, err := l2.ScanTail(func(Position, int64, int64, []byte) error { return nil }); err != nil {
		t.Fatalf("after truncation: %v", err)
	}
	// The next append starts a new file (docs/protocol.md §5.2).
	if got := l2.Position().FileID; got != 1 {
		t.Fatalf("next file %d, want 1", got)
	}
}

func TestFileNames(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"0.log", "1.log", "01.log", "x.log", "2.idx", "-1.log"} {
		os.WriteFile(filepath.Join(dir, n), nil, 0o644)
	}
	l, err := Open(Options{Dir: dir, Decode: testDecode})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(l.Files()); got != "[0 1]" {
		t.Fatalf("files %s", got)
	}
	if l.Position().FileID != 2 {
		t.Fatalf("next id %d", l.Position().FileID)
	}
}

// CommitQuiet makes the group visible at once but leaves the wake-up of
// the readers waiting for it to the caller (the broker wakes them after
// answering the group's submitters).
func TestCommitQuietWakesOnlyWhenClosed(t *testing.T) {
	l, err := Open(Options{Dir: t.TempDir(), Decode: testDecode})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	waiting := l.Changed()
	blk := testBlock(1, 1, 10)
	if _, err := l.Append(blk, []Mark{{EventID: 1}}); err != nil {
		t.Fatal(err)
	}
	ch := l.CommitQuiet()
	if got, want := l.Committed(), (Position{FileID: l.Files()[0], Offset: int64(len(blk))}); got != want {
		t.Fatalf("committed after CommitQuiet = %+v, want %+v", got, want)
	}
	select {
	case <-waiting:
		t.Fatal("CommitQuiet woke the waiting readers itself")
	default:
	}
	if l.Changed() == waiting {
		t.Fatal("a reader arriving after CommitQuiet would wait for a commit that happened")
	}
	close(ch)
	select {
	case <-waiting:
	default:
		t.Fatal("closing the returned channel did not wake the readers waiting for the commit")
	}
}
