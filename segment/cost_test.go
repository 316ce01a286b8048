package segment

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/smssmq/smss/internal/rchar"
)

// costOf returns the bytes read and allocated by f.
func costOf(t *testing.T, f func()) (read, alloc int64) {
	t.Helper()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	r := rchar.Read(t)
	f()
	read = rchar.Read(t) - r
	runtime.ReadMemStats(&after)
	return read, int64(after.TotalAlloc - before.TotalAlloc)
}

// fillFiles appends 200-byte single-id blocks in groups of 10 until the log
// has `files` complete files and returns the last id.
func fillFiles(t *testing.T, l *Log, files int64) int64 {
	t.Helper()
	id := int64(1)
	for l.Position().FileID < files {
		var data []byte
		var marks []Mark
		for j := 0; j < 10; j++ {
			marks = append(marks, Mark{EventID: id, Off: int64(len(data))})
			data = append(data, testBlock(id, id, 180)...)
			id++
		}
		appendGroup(t, l, data, marks)
	}
	return id - 1
}

// lookupSlack bounds what one lookup may read or allocate: a few reads of
// about an index interval (the files' first blocks, the verified entry,
// the scan from it), with room for /proc reads and the runtime.
const lookupSlack = 64 << 10

// Regression: every scan started with a 256 KiB read and buffer, also the
// ones that look at a single block (a file's first eventId, the check of an
// index entry) or scan less than an index interval (from the entry to the
// target). A Locate, i.e. every subscribe and replica start, read and
// allocated over 512 KiB to find a position within 4 KiB.
func TestLookupsReadAboutAnIndexInterval(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, MaxFileSize: 1 << 20, Decode: testDecode}
	l, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	last := fillFiles(t, l, 4)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, err = Open(opts) // nothing cached: first eventIds are read too
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i, target := range []int64{last / 2, last/2 + 1000, last / 5, last - 3, 1} {
		var loc Located
		read, alloc := costOf(t, func() {
			if loc, err = l.Locate(target); err != nil {
				t.Fatal(err)
			}
		})
		if loc.PrevLast != target {
			t.Fatalf("locate %d: prevLast %d", target, loc.PrevLast)
		}
		if read > lookupSlack || alloc > lookupSlack {
			t.Fatalf("locate %d (lookup %d) read %d bytes and allocated %d (limit %d each)", target, i, read, alloc, lookupSlack)
		}
		t.Logf("locate %d: read %d bytes, allocated %d", target, read, alloc)
	}
	l2, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	read, alloc := costOf(t, func() {
		if first, ok, err := l2.FirstEventID(); err != nil || !ok || first != 1 {
			t.Fatalf("first eventId %d %v %v", first, ok, err)
		}
	})
	if read > lookupSlack || alloc > lookupSlack {
		t.Fatalf("FirstEventID read %d bytes and allocated %d (limit %d each)", read, alloc, lookupSlack)
	}
}

// Regression: index files are not fsynced, so a machine crash can leave
// one empty or cut short, and a file written without one (by the original
// smss) has none. Locate then scanned from the last entry it had, up to the
// whole file, at every subscribe, and LastBlock (retention, operator views)
// read the whole file at every call. Now the first such lookup rebuilds
// the index and later ones read about an index interval again.
func TestShortIndexIsRebuiltOnce(t *testing.T) {
	for _, damage := range []struct {
		name string
		do   func(path string) error
	}{
		{"missing", os.Remove},
		{"empty", func(p string) error { return os.Truncate(p, 0) }},
		{"cut", func(p string) error { return os.Truncate(p, 16*entrySize) }},
	} {
		t.Run(damage.name, func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{Dir: dir, MaxFileSize: 1 << 20, Decode: testDecode}
			l, err := Open(opts)
			if err != nil {
				t.Fatal(err)
			}
			last := fillFiles(t, l, 3)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			idx, _ := filepath.Glob(filepath.Join(dir, "*.idx"))
			if len(idx) != 3 {
				t.Fatalf("index files %v", idx)
			}
			for _, p := range idx {
				if err := damage.do(p); err != nil {
					t.Fatal(err)
				}
			}
			l, err = Open(opts)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			st, err := os.Stat(l.Path(1))
			if err != nil {
				t.Fatal(err)
			}
			size := st.Size()
			target := last / 2 // in file 1
			want, wantBlock := Position{FileID: 1, Offset: -1}, []byte(nil)
			_, err = l.scan(1, 0, -1, func(off, first, _ int64, b []byte) error {
				if first > target && want.Offset < 0 {
					want.Offset = off
				}
				wantBlock = append(wantBlock[:0], b...)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 3; i++ {
				var loc Located
				read, _ := costOf(t, func() {
					if loc, err = l.Locate(target + int64(i)); err != nil {
						t.Fatal(err)
					}
				})
				wantPos := want
				wantPos.Offset += int64(i) * int64(len(testBlock(1, 1, 180)))
				if loc.Pos != wantPos {
					t.Fatalf("locate %d: %v, want %v", target+int64(i), loc.Pos, wantPos)
				}
				limit := int64(lookupSlack)
				if i == 0 {
					limit += size // the rebuild reads the file once
				}
				if read > limit {
					t.Fatalf("locate %d (call %d) read %d bytes (limit %d)", target+int64(i), i, read, limit)
				}
			}
			for i := 0; i < 3; i++ {
				var got []byte
				read, _ := costOf(t, func() {
					if got, err = l.LastBlock(0); err != nil {
						t.Fatal(err)
					}
				})
				limit := int64(lookupSlack)
				if i == 0 {
					limit += size
				}
				if got == nil || read > limit {
					t.Fatalf("LastBlock(0) (call %d) read %d bytes (limit %d), block %d bytes", i, read, limit, len(got))
				}
			}
			got, err := l.LastBlock(1)
			if err != nil || !bytes.Equal(got, wantBlock) {
				t.Fatalf("LastBlock(1) = %x, %v; want %x", got, err, wantBlock)
			}
		})
	}
}

// A read-only view and the file being appended leave index files alone:
// another Log's writer, or this one's, owns them.
func TestIndexOwnedByAWriterIsNotRebuilt(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, MaxFileSize: 1 << 20, Decode: testDecode}
	l, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	fillFiles(t, l, 1)
	// File 1 is being appended: cut its index behind the writer's back.
	if _, err := l.Append(testBlock(1<<40, 1<<40, 180), []Mark{{EventID: 1 << 40}}); err != nil {
		t.Fatal(err)
	}
	l.Commit()
	p := l.indexPath(1)
	before, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, 0); err != nil {
		t.Fatal(err)
	}
	view, err := Open(Options{Dir: dir, MaxFileSize: 1 << 20, Decode: testDecode, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer view.Close()
	for _, lg := range []*Log{l, view} {
		if _, err := lg.Locate(1 << 40); err != nil {
			t.Fatal(err)
		}
		if _, err := lg.LastBlock(1); err != nil {
			t.Fatal(err)
		}
	}
	after, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if after.Size() != 0 || !os.SameFile(before, after) {
		t.Fatalf("the index of the file being appended was replaced (size %d)", after.Size())
	}
	if _, err := view.Append(testBlock(1<<41, 1<<41, 1), []Mark{{EventID: 1 << 41}}); err == nil {
		t.Fatal("a read-only view accepted an append")
	}
}

func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// Regression: every Reader allocated a 64 KiB buffer on its first read,
// however little there was to read, and kept it while idle (Close kept
// buffers up to that size), so each waiting subscriber or slave pinned
// 64 KiB. A reader's buffer now follows what it reads, and Close frees it.
func TestReaderMemoryFollowsTheData(t *testing.T) {
	l, err := Open(Options{Dir: t.TempDir(), Decode: testDecode})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for id := int64(1); id <= 3; id++ {
		if _, err := l.Append(testBlock(id, id, 100), []Mark{{EventID: id}}); err != nil {
			t.Fatal(err)
		}
	}
	l.Commit()
	const readers = 500
	rs := make([]*Reader, readers)
	base := heapInUse()
	for i := range rs {
		rs[i] = l.NewReader(Position{})
		n, _, err := rs[i].Next(10, func(int64, int64, []byte, Position) error { return nil })
		if err != nil || n != 3 {
			t.Fatalf("read %d blocks: %v", n, err)
		}
	}
	active := (heapInUse() - base) / readers
	for _, r := range rs {
		r.Close()
	}
	idle := (heapInUse() - base) / readers
	t.Logf("per reader: %d bytes while reading, %d after Close", active, idle)
	// 3 blocks of 120 bytes: one small buffer while reading, none while
	// idle (a Reader itself is about 100 bytes).
	if active > 2*readerFirstBuf || idle > 512 {
		t.Fatalf("a reader of 360 bytes holds %d bytes while reading and %d after Close", active, idle)
	}
	// A closed reader carries on where it was.
	if _, err := l.Append(testBlock(4, 4, 100), []Mark{{EventID: 4}}); err != nil {
		t.Fatal(err)
	}
	l.Commit()
	var got int64
	if n, _, err := rs[0].Next(10, func(first, _ int64, _ []byte, _ Position) error { got = first; return nil }); err != nil || n != 1 || got != 4 {
		t.Fatalf("after Close: %d blocks, first %d, err %v", n, got, err)
	}
}
