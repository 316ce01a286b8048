package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// lookups is everything a log answers that the index could influence:
// Locate for the eventIds in and around one file, the end ScanTail finds
// with the last block it sees (what recovery uses), and each file's last
// block.
type lookups struct {
	located  []Located
	tailEnd  Position
	tailLast int64
	lastBlks [][]byte
}

func collectLookups(t *testing.T, dir string, from, to int64) lookups {
	t.Helper()
	l, err := Open(Options{Dir: dir, Decode: testDecode, MaxFileSize: 2048, IndexInterval: 256, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	var out lookups
	for id := from; id <= to; id++ {
		loc, err := l.Locate(id)
		if err != nil {
			t.Fatalf("Locate(%d): %v", id, err)
		}
		out.located = append(out.located, loc)
	}
	out.tailEnd, err = l.ScanTail(func(_ Position, first, _ int64, _ []byte) error {
		out.tailLast = first
		return nil
	})
	if err != nil {
		t.Fatalf("ScanTail: %v", err)
	}
	for _, id := range l.Files() {
		b, err := l.LastBlock(id)
		if err != nil {
			t.Fatalf("LastBlock(%d): %v", id, err)
		}
		out.lastBlks = append(out.lastBlks, b)
	}
	return out
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// indexDamage rewrites an index file's bytes; nil output removes the file.
type indexDamage struct {
	name  string
	apply func(idx, other []byte) []byte
}

func mapEntries(idx []byte, f func(id, off int64) (int64, int64)) []byte {
	out := make([]byte, 0, len(idx))
	for i := 0; i+entrySize <= len(idx); i += entrySize {
		id, off := f(int64(binary.LittleEndian.Uint64(idx[i:])), int64(binary.LittleEndian.Uint64(idx[i+8:])))
		out = appendEntry(out, id, off)
	}
	return append(out, idx[len(idx)-len(idx)%entrySize:]...)
}

func indexDamages() []indexDamage {
	return []indexDamage{
		{"removed", func([]byte, []byte) []byte { return nil }},
		{"empty", func([]byte, []byte) []byte { return []byte{} }},
		{"half an entry", func(b, _ []byte) []byte { return b[:min(7, len(b))] }},
		{"last entry cut", func(b, _ []byte) []byte { return b[:max(0, len(b)-5)] }},
		{"zero-filled", func(b, _ []byte) []byte { return make([]byte, len(b)) }},
		{"0xff-filled", func(b, _ []byte) []byte { return bytes.Repeat([]byte{0xff}, len(b)) }},
		{"garbage appended", func(b, _ []byte) []byte {
			return append(append([]byte(nil), b...), "\x07garbage-that-is-37-bytes-long!!!!!!"...)
		}},
		{"a bogus entry appended", func(b, _ []byte) []byte { return appendEntry(append([]byte(nil), b...), 1<<40, 3) }},
		{"entries reversed", func(b, _ []byte) []byte {
			out := make([]byte, 0, len(b))
			for i := len(b)/entrySize - 1; i >= 0; i-- {
				out = append(out, b[i*entrySize:(i+1)*entrySize]...)
			}
			return out
		}},
		{"entries doubled", func(b, _ []byte) []byte {
			var out []byte
			for i := 0; i+entrySize <= len(b); i += entrySize {
				out = append(append(out, b[i:i+entrySize]...), b[i:i+entrySize]...)
			}
			return out
		}},
		{"offsets past the file", func(b, _ []byte) []byte {
			return mapEntries(b, func(id, off int64) (int64, int64) { return id, off + 1<<40 })
		}},
		{"offsets negative", func(b, _ []byte) []byte {
			return mapEntries(b, func(id, off int64) (int64, int64) { return id, -off - 1 })
		}},
		{"offsets off by one", func(b, _ []byte) []byte {
			return mapEntries(b, func(id, off int64) (int64, int64) { return id, off + 1 })
		}},
		{"eventIds off by one up", func(b, _ []byte) []byte {
			return mapEntries(b, func(id, off int64) (int64, int64) { return id + 1, off })
		}},
		{"eventIds off by one down", func(b, _ []byte) []byte {
			return mapEntries(b, func(id, off int64) (int64, int64) { return id - 1, off })
		}},
		{"eventIds zero", func(b, _ []byte) []byte { return mapEntries(b, func(_, off int64) (int64, int64) { return 0, off }) }},
		{"another file's index", func(_, other []byte) []byte { return append([]byte(nil), other...) }},
	}
}

// TestIndexDamageNeverChangesLookups damages the sparse index of an older
// file and of the newest file in every way of indexDamages, and flips
// single bits at every byte of them, and checks that every lookup answers
// exactly as with the clean index (the index is derived data, verified
// before use and rebuilt when it lies).
func TestIndexDamageNeverChangesLookups(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(Options{Dir: dir, Decode: testDecode, MaxFileSize: 2048, IndexInterval: 256})
	if err != nil {
		t.Fatal(err)
	}
	lasts := fill(t, l, 300, 3)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	maxID := lasts[len(lasts)-1]
	files := l.Files()
	if len(files) < 5 {
		t.Fatalf("only %d files", len(files))
	}
	// An older file and the newest one (whose index recovery's ScanTail
	// and LastBlock use).
	targets := []int64{files[1], files[len(files)-1]}
	variants, locates := 0, 0
	for _, id := range targets {
		// Lookups of the eventIds of this file and just around it.
		first, _, err := l.firstID(id)
		if err != nil {
			t.Fatal(err)
		}
		from := first - 2
		to := maxID + 2
		if id+1 < int64(len(files)) {
			next, _, err := l.firstID(id + 1)
			if err != nil {
				t.Fatal(err)
			}
			to = next + 1
		}
		clean := collectLookups(t, dir, from, to)
		path := filepath.Join(dir, fmt.Sprintf("%d.idx", id))
		orig, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(orig) < 2*entrySize {
			t.Fatalf("index of file %d has %d bytes", id, len(orig))
		}
		other, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("%d.idx", files[0])))
		if err != nil {
			t.Fatal(err)
		}
		try := func(name string, damaged []byte) {
			t.Helper()
			variants++
			locates += len(clean.located)
			if damaged == nil {
				os.Remove(path)
			} else if err := os.WriteFile(path, damaged, 0o644); err != nil {
				t.Fatal(err)
			}
			if got := collectLookups(t, dir, from, to); !reflect.DeepEqual(got, clean) {
				t.Fatalf("file %d, index %s: lookups differ from the clean index:\n got %+v\nwant %+v", id, name, got, clean)
			}
			if err := os.WriteFile(path, orig, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		for _, d := range indexDamages() {
			try(d.name, d.apply(orig, other))
		}
		for i := range orig {
			b := append([]byte(nil), orig...)
			b[i] ^= 1 << (i % 8)
			try(fmt.Sprintf("bit %d of byte %d flipped", i%8, i), b)
		}
	}
	t.Logf("%d damaged indexes, %d Locate calls, every answer identical to the clean index's", variants, locates)
}

// TestTornDataTailReportsFileAndOffset: a damaged log tail is reported as
// a *CorruptError naming the file and the offset of the first bad byte,
// torn (a strict prefix of a block) or not, whatever the index says.
func TestTornDataTailReportsFileAndOffset(t *testing.T) {
	base := t.TempDir()
	l, err := Open(Options{Dir: base, Decode: testDecode, MaxFileSize: 1 << 20, IndexInterval: 64})
	if err != nil {
		t.Fatal(err)
	}
	fill(t, l, 40, 4)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	path := l.Path(0)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Block boundaries, to know where the last block starts.
	var starts []int
	for off := 0; off < len(data); {
		_, _, n, err := testDecode(data[off:])
		if err != nil {
			t.Fatal(err)
		}
		starts = append(starts, off)
		off += n
	}
	lastStart := starts[len(starts)-1]
	for _, tc := range []struct {
		name string
		edit func([]byte) []byte
		torn bool
		at   int
	}{
		{"cut inside the length", func(b []byte) []byte { return b[:lastStart+2] }, true, lastStart},
		{"cut inside the body", func(b []byte) []byte { return b[:len(b)-3] }, true, lastStart},
		{"last block zero-filled", func(b []byte) []byte {
			return append(b[:lastStart:lastStart], make([]byte, len(b)-lastStart)...)
		}, false, lastStart},
		{"garbage appended", func(b []byte) []byte { return append(b, 0xff, 0xff, 0xff, 0xff, 1) }, false, len(data)},
		{"length claims more than the file", func(b []byte) []byte {
			c := append([]byte(nil), b...)
			binary.LittleEndian.PutUint32(c[lastStart:], 1<<19)
			return c
		}, true, lastStart},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "0.log"), tc.edit(append([]byte(nil), data...)), 0o644); err != nil {
				t.Fatal(err)
			}
			idx, _ := os.ReadFile(filepath.Join(base, "0.idx"))
			os.WriteFile(filepath.Join(dir, "0.idx"), idx, 0o644)
			l, err := Open(Options{Dir: dir, Decode: testDecode, MaxFileSize: 1 << 20, IndexInterval: 64})
			if err != nil {
				t.Fatal(err)
			}
			for _, scan := range []func() (Position, error){
				func() (Position, error) {
					return l.Scan(Position{}, func(Position, int64, int64, []byte) error { return nil })
				},
				func() (Position, error) {
					return l.ScanTail(func(Position, int64, int64, []byte) error { return nil })
				},
			} {
				end, err := scan()
				var ce *CorruptError
				if !errors.As(err, &ce) {
					t.Fatalf("scan: %v, want a CorruptError", err)
				}
				if ce.Path != filepath.Join(dir, "0.log") || ce.Offset != int64(tc.at) || ce.Torn() != tc.torn || end.Offset != int64(tc.at) {
					t.Fatalf("CorruptError %v (torn %v), end %s; want offset %d torn %v", ce, ce.Torn(), end, tc.at, tc.torn)
				}
			}
		})
	}
}
