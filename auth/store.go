package auth

import (
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
)

// Store holds the users of a users file as an immutable snapshot that
// Reload swaps atomically: a request sees the old or the new file, never a
// mix, and a failed reload keeps the old snapshot.
type Store struct {
	path string
	log  *slog.Logger
	mu   sync.Mutex // serialises reloads
	cur  atomic.Pointer[snapshot]
}

type snapshot struct {
	users map[string]*Principal
	// fakeIters is the iteration count offered for unknown users: the most
	// common one in the file, so it does not tell them apart.
	fakeIters int
	gen       uint64
}

// OpenStore loads the users file at path. logger nil means slog.Default().
func OpenStore(path string, logger *slog.Logger) (*Store, error) {
	if logger == nil {
		logger = slog.Default()
	}
	s := &Store{path: path, log: logger}
	if err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// NewStore returns a store holding f (already validated), with no file
// behind it: Reload fails. For tests and embedding.
func NewStore(f *File) (*Store, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	s := &Store{log: slog.Default()}
	s.cur.Store(newSnapshot(f, 1))
	return s, nil
}

// Path is the users file the store reads ("" for NewStore).
func (s *Store) Path() string { return s.path }

// Reload re-reads the users file. On any error the current users stay in
// force and the error says why.
func (s *Store) Reload() error {
	if s.path == "" {
		return fmt.Errorf("users store has no file to reload")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	info, err := os.Stat(s.path)
	if err != nil {
		return fmt.Errorf("users file: %w", err)
	}
	// Other users may not read it (the credentials allow an offline
	// guessing attack) nor anyone but its owner write it (they could grant
	// themselves anything): refused. Readable by the group: a warning.
	switch perm := info.Mode().Perm(); {
	case perm&0o026 != 0:
		return fmt.Errorf("users file %s: mode %v lets other users read it or others than its owner write it; chmod 600 it",
			s.path, fs.FileMode(perm))
	case perm&0o040 != 0:
		s.log.Warn("users file is readable by its group; chmod 600 it unless that is meant",
			"path", s.path, "mode", fs.FileMode(perm).String())
	}
	f, err := ReadFile(s.path)
	if err != nil {
		return err
	}
	var gen uint64 = 1
	if old := s.cur.Load(); old != nil {
		gen = old.gen + 1
	}
	snap := newSnapshot(f, gen)
	s.cur.Store(snap)
	enabled := 0
	for _, p := range snap.users {
		if !p.Disabled {
			enabled++
		}
	}
	s.log.Info("users file loaded", "path", s.path, "users", len(snap.users), "enabled", enabled, "generation", gen)
	return nil
}

func newSnapshot(f *File, gen uint64) *snapshot {
	snap := &snapshot{users: make(map[string]*Principal, len(f.Users)), fakeIters: DefaultIterations, gen: gen}
	count := map[int]int{}
	for i := range f.Users {
		u := &f.Users[i]
		snap.users[u.Name] = newPrincipal(u)
		count[u.SCRAM.Iterations]++
	}
	best := 0
	for it, n := range count {
		if n > best || (n == best && it < snap.fakeIters) {
			best, snap.fakeIters = n, it
		}
	}
	return snap
}

// Lookup returns the current principal called name (disabled ones too), or
// nil.
func (s *Store) Lookup(name string) *Principal {
	return s.cur.Load().users[name]
}

// Generation counts successful loads; it changes when the users change.
func (s *Store) Generation() uint64 { return s.cur.Load().gen }
