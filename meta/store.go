package meta

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
)

// ErrClosed is returned by every operation on a closed Store.
var ErrClosed = errors.New("meta store closed")

// Badger sizing for a small server. Badger's defaults (5×64 MiB memtables,
// 256 MiB block cache, 1 GiB value-log files) cost hundreds of MiB; the meta
// store holds a few small keys per topic plus the delay queue.
const (
	memTableSize     = 8 << 20
	numMemtables     = 2
	blockCacheSize   = 8 << 20
	indexCacheSize   = 4 << 20
	valueLogFileSize = 64 << 20
	// Values at least this long go to the value log. Topic meta, lifetimes,
	// role, checkpoint and typical delay payloads stay in the LSM tree,
	// where compaction reclaims them exactly; large delay payloads (up to
	// 8 MiB, beyond badger's 1 MiB in-tree limit) go to the value log, which
	// needs RunGC and its guard against resurrection (gc.go). A transaction
	// holds at most 15% of memTableSize (1.2 MiB) of in-tree data, so this
	// also bounds what one delay costs a batch.
	valueThreshold = 64 << 10
)

// Options configures Open.
type Options struct {
	// Dir is the badger directory (<store.path>/meta); created if missing.
	Dir    string
	Logger *slog.Logger
	// InMemory keeps everything in RAM (tests only); Dir must be empty.
	InMemory bool
	// ReadOnly opens badger read-only (a start on a full disk): nothing
	// is written, not even the lock's pid file, and every Commit fails.
	// Badger then refuses a directory whose memtable log must be replayed
	// and truncated, which only a clean Close avoids.
	ReadOnly bool

	// tune overrides the sizing constants in tests (zero = default), so
	// that value-log behaviour can be exercised with small values.
	tune tuning
}

type tuning struct {
	vlogFileSize, valueThreshold, memTableSize int64
}

func orDefault(v, def int64) int64 {
	if v > 0 {
		return v
	}
	return def
}

// Store is the badger-backed meta store. Reads may run from any goroutine;
// writes go through Commit, which the single writer calls.
type Store struct {
	db  *badger.DB
	log *slog.Logger
	// valueThreshold is the value length from which badger moves a value
	// to the value log (Fits needs it to mirror badger's size estimate).
	valueThreshold int64

	// mu orders Close after in-flight operations: badger must not be used
	// after DB.Close. Taken before gcMu.
	mu     sync.RWMutex
	closed bool

	// gcMu keeps delay reads and deletions out of a value-log GC round
	// (gc.go): they read-lock it, a round write-locks it.
	gcMu sync.RWMutex
	// gcRepair holds keys a GC round failed to delete again (gc.go).
	gcRepair [][]byte
}

// Open opens (or creates) the meta store.
func Open(opts Options) (*Store, error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("component", "meta")
	if !opts.InMemory && opts.Dir == "" {
		return nil, errors.New("open meta store: no directory given")
	}
	bo := badger.DefaultOptions(opts.Dir).WithValueThreshold(orDefault(opts.tune.valueThreshold, valueThreshold))
	if opts.InMemory {
		// In memory badger keeps every value in the tree but still refuses
		// values above the threshold, so leave it at its 1 MiB default.
		bo = badger.DefaultOptions("").WithInMemory(true)
	}

	bo = bo.
		WithLogger(badgerLogger{log: log}).
		WithMemTableSize(orDefault(opts.tune.memTableSize, memTableSize)).
		WithNumMemtables(numMemtables).
		WithNumLevelZeroTables(2).
		WithNumLevelZeroTablesStall(4).
		WithBlockCacheSize(blockCacheSize).
		WithIndexCacheSize(indexCacheSize).
		WithValueLogFileSize(orDefault(opts.tune.vlogFileSize, valueLogFileSize)).
		WithNumCompactors(2).
		WithCompression(options.Snappy).
		// The writer calls Sync when its durability level asks for it.
		WithSyncWrites(false).
		// Transactions are blind writes from a single writer; there is
		// nothing to detect and the bookkeeping costs memory.
		WithDetectConflicts(false).
		WithMetricsEnabled(false).
		WithReadOnly(opts.ReadOnly)
	db, err := badger.Open(bo)
	if err != nil {
		if opts.InMemory {
			return nil, fmt.Errorf("open in-memory meta store: %w", err)
		}
		return nil, fmt.Errorf("open meta store %s: %w", opts.Dir, err)
	}
	threshold := bo.ValueThreshold
	if opts.InMemory {
		threshold = math.MaxInt64 // badger keeps every value in the tree
	}
	return &Store{db: db, log: log, valueThreshold: threshold}, nil
}

// Close closes the store. It is safe to call more than once.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close meta store: %w", err)
	}
	return nil
}

// Sync makes every committed write durable (memtable WAL and value log).
func (s *Store) Sync() error {
	if err := s.acquire(); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	if err := s.db.Sync(); err != nil {
		return fmt.Errorf("sync meta store: %w", err)
	}
	return nil
}

// acquire read-locks the store for one operation; the caller unlocks.
func (s *Store) acquire() error {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return ErrClosed
	}
	return nil
}

// badgerLogger routes badger's own messages to slog. Badger is chatty at
// info level (compactions, flushes), so only warnings and errors pass.
type badgerLogger struct{ log *slog.Logger }

func (l badgerLogger) Errorf(f string, v ...any) {
	l.log.Error(strings.TrimSpace(fmt.Sprintf(f, v...)), "source", "badger")
}

func (l badgerLogger) Warningf(f string, v ...any) {
	l.log.Warn(strings.TrimSpace(fmt.Sprintf(f, v...)), "source", "badger")
}

func (badgerLogger) Infof(string, ...any)  {}
func (badgerLogger) Debugf(string, ...any) {}
