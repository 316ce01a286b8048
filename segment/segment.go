package segment

import (
	"errors"
	"fmt"
	"github.com/smssmq/smss/internal/rawsys"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/smssmq/smss/internal/fsmode"
)

// Decoder parses the block at the start of buf and returns the first and last
// eventId it covers and its length. It returns an error that is
// codec.ErrIncomplete (errors.Is) when buf is a strict prefix of a possibly
// valid block, as the block codecs' decoders do, and any other error when the
// bytes can never be a valid block. It must not panic.
type Decoder func(buf []byte) (first, last int64, n int, err error)

// Options configure a Log. Zero values take the documented defaults.
type Options struct {
	// Dir holds the files. It is created if missing (unless ReadOnly).
	Dir string
	// MaxFileSize is the roll threshold in bytes (store.maxLogSize).
	MaxFileSize int64
	// IndexInterval is the minimum distance in bytes between two index
	// entries of one file. Default 4096.
	IndexInterval int64
	// Decode parses one block. Required.
	Decode Decoder
	// NoCache asks the kernel to drop cached pages of a file at creation
	// (store.noCache).
	NoCache bool
	Logger  *slog.Logger
	// OpenFile opens the file appends go to. Default os.OpenFile; tests
	// inject failing writes and fsyncs through it.
	OpenFile func(path string, flag int, perm os.FileMode) (File, error)
	// ReadOnly makes the Log a view of a directory that another Log may
	// be appending to: it refuses appends and never rewrites index files
	// (it cannot know which file the other one's writer owns).
	// A view of a directory that does not exist (yet) is an empty log.
	ReadOnly bool
}

// File is what the writer needs of an open log file.
type File interface {
	Write(p []byte) (int, error)
	Sync() error
	Truncate(size int64) error
	Seek(offset int64, whence int) (int64, error)
	Close() error
}

func osOpenFile(path string, flag int, perm os.FileMode) (File, error) {
	return os.OpenFile(path, flag, perm)
}

// Position names a byte offset in one file of a Log.
type Position struct {
	FileID int64
	Offset int64
}

func (p Position) String() string { return fmt.Sprintf("%d:%d", p.FileID, p.Offset) }

// Less orders positions by file, then offset.
func (p Position) Less(q Position) bool {
	return p.FileID < q.FileID || (p.FileID == q.FileID && p.Offset < q.Offset)
}

// Mark tells Append where one block starts inside the appended bytes.
type Mark struct {
	EventID int64 // first eventId of the block
	Off     int64 // offset of the block relative to the start of the data
}

// Log is one directory of segment files. Append, Truncate, Sync, Roll and
// Commit belong to the single writer; the read methods are safe for
// concurrent use.
type Log struct {
	opts Options
	log  *slog.Logger

	// Writer state: touched only by the single writer goroutine.
	cur       File
	curIdx    *os.File
	curID     int64
	curSize   int64
	lastIndex int64 // offset of the last index entry of the current file, -1 if none
	idxBuf    []byte
	unsynced  bool
	slowSync  bool        // the last Sync was slow: the next one goes through the runtime (syncCurrent)
	curIO     rawsys.File // Append's raw writes of cur while they are fast
	idxIO     rawsys.File // the same for curIdx
	reopen    bool        // the current file exists and was closed by CloseIdle

	mu        sync.Mutex
	files     []int64 // existing file ids, ascending, no gaps
	firstIDs  map[int64]int64
	committed Position
	changed   chan struct{}
	closed    bool
	// appendID is the file this process's writer created last (-1: none):
	// the only one whose index the writer may still append to. Every other
	// file's index belongs to lookups, which rebuild it when it is missing
	// or falls short of its log.
	appendID int64

	buildMu sync.Mutex // one index rebuild at a time (they share a temporary name)
}

// Open lists dir and prepares a Log whose next append creates file
// max+1 (docs/protocol.md §5.2: every process start begins a new file).
func Open(opts Options) (*Log, error) {
	if opts.Decode == nil {
		return nil, errors.New("segment: Options.Decode is required")
	}
	if opts.MaxFileSize <= 0 {
		opts.MaxFileSize = 1 << 30
	}
	if opts.OpenFile == nil {
		opts.OpenFile = osOpenFile
	}
	if opts.IndexInterval <= 0 {
		opts.IndexInterval = 4096
	}
	lg := opts.Logger
	if lg == nil {
		lg = slog.Default()
	}
	if !opts.ReadOnly { // a view never creates the directory it looks at
		if err := os.MkdirAll(opts.Dir, fsmode.Dir()); err != nil {
			return nil, fmt.Errorf("segment: create dir %s: %w", opts.Dir, err)
		}
	}
	ids, err := listIDs(opts.Dir)
	if opts.ReadOnly && errors.Is(err, fs.ErrNotExist) {
		// A view of a directory nobody created yet (a topic the original
		// server created and never wrote) is an empty log, not an error.
		ids, err = nil, nil
	}
	if err != nil {
		return nil, err
	}
	l := &Log{opts: opts, log: lg, files: ids, firstIDs: map[int64]int64{}, changed: make(chan struct{}), lastIndex: -1, appendID: -1}
	l.curID = 0
	if len(ids) > 0 {
		last := ids[len(ids)-1]
		l.curID = last + 1
		st, err := os.Stat(l.Path(last))
		if err != nil {
			return nil, fmt.Errorf("segment: stat %s: %w", l.Path(last), err)
		}
		l.committed = Position{FileID: last, Offset: st.Size()}
	} else {
		l.committed = Position{FileID: 0, Offset: 0}
	}
	return l, nil
}

// listIDs returns the ids of "<id>.log" files in dir, ascending. A gap in
// the sequence is reported: readers walk files by id and a hole would make
// them skip data silently.
func listIDs(dir string) ([]int64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("segment: list %s: %w", dir, err)
	}
	var ids []int64
	for _, e := range ents {
		name := e.Name()
		if !strings.HasSuffix(name, ".log") || e.IsDir() {
			continue
		}
		id, err := strconv.ParseInt(strings.TrimSuffix(name, ".log"), 10, 64)
		if err != nil || id < 0 || strconv.FormatInt(id, 10)+".log" != name {
			continue
		}
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids, nil
}

// Dir returns the directory of the log.
func (l *Log) Dir() string { return l.opts.Dir }

// Path returns the path of file id.
func (l *Log) Path(id int64) string {
	return filepath.Join(l.opts.Dir, strconv.FormatInt(id, 10)+".log")
}

func (l *Log) indexPath(id int64) string {
	return filepath.Join(l.opts.Dir, strconv.FormatInt(id, 10)+".idx")
}

// Files returns the ids of the existing files, ascending.
func (l *Log) Files() []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int64(nil), l.files...)
}

// Position returns where the next append will land (writer only).
func (l *Log) Position() Position { return Position{FileID: l.curID, Offset: l.curSize} }

// Append writes data, which holds whole blocks starting at the given marks,
// at the end of the current file with one write. A short or failed write is
// truncated back before returning, so the file never keeps a partial group;
// if even that fails the error wraps ErrFatal.
func (l *Log) Append(data []byte, marks []Mark) (Position, error) {
	if err := l.ensureFile(); err != nil {
		return Position{}, err
	}
	start := Position{FileID: l.curID, Offset: l.curSize}
	var (
		n   int
		err error
	)
	if f, ok := l.cur.(*os.File); ok {
		// Without waking the runtime's monitor per group (package rawsys).
		n, err = l.curIO.Write(f, data)
	} else {
		n, err = l.cur.Write(data)
	}
	if err != nil || n != len(data) {
		if err == nil {
			err = fmtShort(n, len(data))
		}
		werr := fmt.Errorf("segment: append %s at %d: %w", l.Path(l.curID), start.Offset, err)
		if terr := l.Truncate(start); terr != nil {
			return Position{}, fmt.Errorf("%w (rollback failed: %v)", werr, terr)
		}
		return Position{}, werr
	}
	l.curSize += int64(n)
	l.unsynced = true
	l.writeIndex(start.Offset, marks)
	return start, nil
}

func fmtShort(n, want int) error { return fmt.Errorf("short write %d of %d bytes", n, want) }

// writeIndex appends index entries for marks. Index failures are logged and
// otherwise ignored: the index is an accelerator that lookups verify.
func (l *Log) writeIndex(base int64, marks []Mark) {
	buf := l.idxBuf[:0]
	for _, m := range marks {
		off := base + m.Off
		if l.lastIndex >= 0 && off-l.lastIndex < l.opts.IndexInterval {
			continue
		}
		buf = appendEntry(buf, m.EventID, off)
		l.lastIndex = off
		if off == 0 {
			l.mu.Lock()
			l.firstIDs[l.curID] = m.EventID
			l.mu.Unlock()
		}
	}
	l.idxBuf = buf
	if len(buf) == 0 || l.curIdx == nil {
		return
	}
	if _, err := l.idxIO.Write(l.curIdx, buf); err != nil {
		l.log.Warn("segment index write failed; lookups will scan", "file", l.indexPath(l.curID), "err", err)
		l.curIdx.Close()
		l.curIdx = nil
		os.Remove(l.indexPath(l.curID))
	}
}

func (l *Log) ensureFile() error {
	if l.cur != nil {
		return nil
	}
	if l.opts.ReadOnly {
		return fmt.Errorf("segment: %s is opened read-only", l.opts.Dir)
	}
	path := l.Path(l.curID)
	if l.reopen {
		return l.reopenCurrent()
	}
	f, err := l.opts.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, fsmode.File())
	if err != nil {
		return fmt.Errorf("segment: create %s: %w", path, err)
	}
	if of, ok := f.(*os.File); ok && l.opts.NoCache {
		fadviseDontNeed(of)
	}
	idx, err := os.OpenFile(l.indexPath(l.curID), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, fsmode.File())
	if err != nil {
		l.log.Warn("segment index create failed; lookups will scan", "file", l.indexPath(l.curID), "err", err)
		idx = nil
	}
	l.cur, l.curIdx, l.curSize, l.lastIndex = f, idx, 0, -1
	l.mu.Lock()
	if n := len(l.files); n == 0 || l.files[n-1] != l.curID {
		l.files = append(l.files, l.curID)
	}
	delete(l.firstIDs, l.curID)
	l.appendID = l.curID
	l.mu.Unlock()
	// The directory entry must be durable before anything in the file can
	// be acknowledged as synced.
	if err := syncDir(l.opts.Dir); err != nil {
		return err
	}
	return nil
}

// Truncate cuts the current file back to pos (a rollback by the writer).
func (l *Log) Truncate(pos Position) error {
	if l.cur == nil || pos.FileID != l.curID || pos.Offset > l.curSize {
		return fmt.Errorf("segment: truncate %s to %s: not within the current file %d (size %d)", l.opts.Dir, pos, l.curID, l.curSize)
	}
	if err := l.cur.Truncate(pos.Offset); err != nil {
		return fmt.Errorf("%w: truncate %s to %d: %v", ErrFatal, l.Path(l.curID), pos.Offset, err)
	}
	if _, err := l.cur.Seek(pos.Offset, 0); err != nil {
		return fmt.Errorf("%w: seek %s to %d: %v", ErrFatal, l.Path(l.curID), pos.Offset, err)
	}
	l.curSize = pos.Offset
	if l.curIdx != nil {
		if err := truncateIndexFile(l.indexPath(l.curID), pos.Offset); err != nil {
			l.curIdx.Close()
			l.curIdx = nil
			os.Remove(l.indexPath(l.curID))
		}
	}
	l.lastIndex = -1
	if pos.Offset > 0 {
		l.lastIndex = pos.Offset - 1 // conservative: the next entry may come a little late, never wrong
	}
	return nil
}

// ErrFatal marks a failure after which the file's state is unknown: the
// writer must stop (docs/protocol.md §11: never continue past a failed fsync).
var ErrFatal = errors.New("fatal storage error")

// Sync fsyncs the current file if it has unsynced appends.
func (l *Log) Sync() error {
	if l.cur == nil || !l.unsynced {
		return nil
	}
	if err := l.syncCurrent(); err != nil {
		return fmt.Errorf("%w: fsync %s: %v", ErrFatal, l.Path(l.curID), err)
	}
	l.unsynced = false
	return nil
}

// SyncHandle hands the current file to a background fsync: it returns the
// open file (nil when nothing is unsynced) and counts the appends so far as
// synced. The caller fsyncs the handle on another goroutine; if the writer
// rolls or closes the file meanwhile, that path fsyncs it before closing,
// so the handle's Sync failing with os.ErrClosed means the data is synced.
func (l *Log) SyncHandle() File {
	if l.cur == nil || !l.unsynced {
		return nil
	}
	l.unsynced = false
	return l.cur
}

// Unsynced reports whether the current file has appends not yet fsynced.
func (l *Log) Unsynced() bool { return l.unsynced }

// Commit publishes the current end as visible to readers and wakes them.
func (l *Log) Commit() { close(l.CommitQuiet()) }

// CommitQuiet commits like Commit, but hands the caller the channel of
// the readers waiting for this commit instead of closing it; the caller
// must close it. The data is visible at once (Committed moves here); only
// the wake-up is the caller's to time.
func (l *Log) CommitQuiet() chan struct{} {
	l.mu.Lock()
	l.committed = Position{FileID: l.curID, Offset: l.curSize}
	ch := l.changed
	l.changed = make(chan struct{})
	l.mu.Unlock()
	return ch
}

// Committed returns the last committed end position. Readers may read every
// byte before it.
func (l *Log) Committed() Position {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.committed
}

// Changed returns a channel closed by the next Commit (or Close).
func (l *Log) Changed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.changed
}

// Full reports whether the current file reached MaxFileSize.
func (l *Log) Full() bool { return l.cur != nil && l.curSize >= l.opts.MaxFileSize }

// Roll fsyncs and closes the current file; the next append creates the next
// id. Rolled files are always fsynced first (docs/protocol.md §11), whatever the flush
// level, so a closed file is never left with unsynced bytes.
func (l *Log) Roll() error {
	if l.cur == nil {
		return nil
	}
	if err := l.closeCurrent(); err != nil {
		return err
	}
	l.curID++
	l.curSize = 0
	l.reopen = false
	return nil
}

func (l *Log) closeCurrent() error {
	l.unsynced = true
	if err := l.Sync(); err != nil {
		return err
	}
	if err := l.cur.Close(); err != nil {
		return fmt.Errorf("%w: close %s: %v", ErrFatal, l.Path(l.curID), err)
	}
	if l.curIdx != nil {
		l.curIdx.Close()
	}
	l.cur, l.curIdx = nil, nil
	return nil
}

// Close fsyncs and closes the current file and wakes every waiting reader.
func (l *Log) Close() error {
	var err error
	if l.cur != nil {
		err = l.closeCurrent()
	}
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		close(l.changed)
		l.changed = make(chan struct{})
	}
	l.mu.Unlock()
	return err
}

// CloseIdle closes the current file descriptor without changing where the
// next append goes: the next Append reopens the same file at its end. It
// bounds the descriptors held by idle topics.
func (l *Log) CloseIdle() error {
	if l.cur == nil {
		return nil
	}
	if err := l.closeCurrent(); err != nil {
		return err
	}
	l.reopen = true
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("segment: open dir %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) {
		return fmt.Errorf("%w: fsync dir %s: %v", ErrFatal, dir, err)
	}
	return nil
}

func (l *Log) reopenCurrent() error {
	path := l.Path(l.curID)
	f, err := l.opts.OpenFile(path, os.O_WRONLY, fsmode.File())
	if err != nil {
		return fmt.Errorf("segment: reopen %s: %w", path, err)
	}
	if _, err := f.Seek(l.curSize, 0); err != nil {
		f.Close()
		return fmt.Errorf("segment: seek %s: %w", path, err)
	}
	idx, err := os.OpenFile(l.indexPath(l.curID), os.O_WRONLY|os.O_APPEND, fsmode.File())
	if err != nil {
		idx = nil // lookups fall back to scanning and rebuild it
	}
	l.cur, l.curIdx, l.reopen = f, idx, false
	return nil
}
