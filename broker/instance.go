package broker

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/smssmq/smss/internal/fsmode"
)

// InstanceFile is the file in the data directory that keeps the instance
// id a slave names itself with in its replication hello (semi-synchronous
// replication, replication/confirm.go): 12 lowercase hex digits and a
// newline. An original server ignores it.
const InstanceFile = "instance.id"

// InstanceIDLen is the length of an instance id (replication.InstanceIDLen).
const InstanceIDLen = 6

// InstanceID returns the data directory's instance id. The first call of
// the first process on a directory generates a random one and writes it
// atomically (a temporary file, fsynced, renamed, the directory fsynced)
// before returning it; every later call and every later process on the
// directory returns the same id. That is what lets a master count a slave
// once when the slave restarted (even after kill -9) before the master
// noticed that its old connection is dead: the new connection carries the
// same id and replaces the old one.
//
// A read-only start (disk full) writes nothing: an id that is not there
// yet is generated and kept in memory for this process, and the next
// writable start writes its own. When writing the file fails, the id is
// returned with the error and kept in memory the same way (the caller
// decides whether to go on with it). An unreadable file (not 12 hex digits) is
// replaced by a new id, with a warning. A copied data directory carries
// the same id: see docs/protocol.md §12.3 (slave confirmations) for what that means
// and how to give the copy its own (delete the file before its first
// start).
func (b *Broker) InstanceID() ([InstanceIDLen]byte, error) {
	b.inst.mu.Lock()
	defer b.inst.mu.Unlock()
	if b.inst.ok {
		return b.inst.id, nil
	}
	path := filepath.Join(b.opts.Dir, InstanceFile)
	id, err := readInstanceFile(path)
	switch {
	case err == nil:
		b.inst.id, b.inst.ok = id, true
		return id, nil
	case errors.Is(err, errBadInstanceFile):
		b.log.Warn("the instance id file is unreadable; replacing it with a new id", "path", path, "err", err)
	case !errors.Is(err, fs.ErrNotExist):
		return id, fmt.Errorf("broker: read the instance id: %w", err)
	}
	if _, err := rand.Read(id[:]); err != nil {
		return id, fmt.Errorf("broker: generate an instance id: %w", err)
	}
	if b.ReadOnly() != nil {
		b.log.Warn("started read-only: the new instance id is kept in memory only; a restart before a writable start gets another",
			"instanceId", hex.EncodeToString(id[:]))
		b.inst.id, b.inst.ok = id, true
		return id, nil
	}
	if err := writeInstanceFile(path, id); err != nil {
		// Like a read-only start: this process keeps the id in memory
		// (the caller logs the error), and a later process tries again.
		b.inst.id, b.inst.ok = id, true
		return id, fmt.Errorf("broker: write the instance id %s (kept in memory for this process): %w", path, err)
	}
	b.log.Info("generated this data directory's instance id", "path", path, "instanceId", hex.EncodeToString(id[:]))
	b.inst.id, b.inst.ok = id, true
	return id, nil
}

var errBadInstanceFile = errors.New("not 12 hex digits")

func readInstanceFile(path string) ([InstanceIDLen]byte, error) {
	var id [InstanceIDLen]byte
	data, err := os.ReadFile(path)
	if err != nil {
		return id, err
	}
	s := strings.TrimRight(string(data), "\r\n")
	if len(s) != 2*InstanceIDLen {
		return id, fmt.Errorf("%w: %q", errBadInstanceFile, data)
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil {
		return id, fmt.Errorf("%w: %q", errBadInstanceFile, data)
	}
	return id, nil
}

// writeInstanceFile replaces path with id atomically and durably: a crash
// leaves either no file or the whole id, never a torn one, and once it
// returns the id survives a power cut.
func writeInstanceFile(path string, id [InstanceIDLen]byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fsmode.File())
	if err != nil {
		return err
	}
	_, err = f.WriteString(hex.EncodeToString(id[:]) + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(filepath.Dir(path))
}
