package broker

import (
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
)

// TestInstanceID: the id is generated once per data directory, written to
// InstanceFile, and every later open of the directory returns it; a
// read-only start keeps a new id in memory and writes nothing; an
// unreadable file is replaced.
func TestInstanceID(t *testing.T) {
	cases := []struct {
		name string
		run  func(t *testing.T, dir string)
	}{
		{"stable across reopens", func(t *testing.T, dir string) {
			b := openTest(t, dir, func(o *Options) { o.Logger, o.Slave = quietLog, true })
			id, err := b.InstanceID()
			if err != nil {
				t.Fatal(err)
			}
			if id == ([InstanceIDLen]byte{}) {
				t.Fatal("zero id")
			}
			if again, _ := b.InstanceID(); again != id {
				t.Fatalf("second call %x, first %x", again, id)
			}
			data, err := os.ReadFile(filepath.Join(dir, InstanceFile))
			if err != nil {
				t.Fatal(err)
			}
			if string(data) != hex.EncodeToString(id[:])+"\n" {
				t.Fatalf("file holds %q for id %x", data, id)
			}
			if _, err := os.Stat(filepath.Join(dir, InstanceFile+".tmp")); !os.IsNotExist(err) {
				t.Fatalf("temporary file left: %v", err)
			}
			b.Close()
			for _, slave := range []bool{true, false} {
				b := openTest(t, dir, func(o *Options) { o.Logger, o.Slave = quietLog, slave })
				got, err := b.InstanceID()
				b.Close()
				if err != nil || got != id {
					t.Fatalf("reopened (slave %v): %x, %v; want %x", slave, got, err, id)
				}
			}
		}},
		{"read-only start keeps it in memory", func(t *testing.T, dir string) {
			disk := &fakeDisk{}
			disk.free.Store(1 << 30)
			b := openTest(t, dir, readOnlyOpts(disk, true))
			b.Close()
			disk.free.Store(0)
			before := dirState(t, dir)
			b = openTest(t, dir, readOnlyOpts(disk, true))
			if b.ReadOnly() == nil {
				t.Fatal("not a read-only start")
			}
			id, err := b.InstanceID()
			if err != nil || id == ([InstanceIDLen]byte{}) {
				t.Fatalf("read-only: %x, %v", id, err)
			}
			if again, _ := b.InstanceID(); again != id {
				t.Fatalf("read-only second call %x, first %x", again, id)
			}
			b.Close()
			if d := diffState(before, dirState(t, dir)); len(d) > 0 {
				t.Fatalf("a read-only start wrote: %v", d)
			}
			disk.free.Store(1 << 30)
			b = openTest(t, dir, readOnlyOpts(disk, true))
			defer b.Close()
			got, err := b.InstanceID()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(dir, InstanceFile)); err != nil {
				t.Fatalf("writable start wrote no id: %v", err)
			}
			if got == ([InstanceIDLen]byte{}) {
				t.Fatal("zero id")
			}
		}},
		{"write failure keeps it in memory", func(t *testing.T, dir string) {
			b := openTest(t, dir, func(o *Options) { o.Logger = quietLog })
			defer b.Close()
			// The temporary file cannot be created: a directory is in its way.
			if err := os.Mkdir(filepath.Join(dir, InstanceFile+".tmp"), 0o700); err != nil {
				t.Fatal(err)
			}
			id, err := b.InstanceID()
			if err == nil || id == ([InstanceIDLen]byte{}) {
				t.Fatalf("write failure: %x, %v; want an id and an error", id, err)
			}
			if again, err := b.InstanceID(); err != nil || again != id {
				t.Fatalf("second call %x, %v; want %x", again, err, id)
			}
			if _, err := os.Stat(filepath.Join(dir, InstanceFile)); !os.IsNotExist(err) {
				t.Fatalf("file written despite the failure: %v", err)
			}
		}},
		{"unreadable file replaced", func(t *testing.T, dir string) {
			b := openTest(t, dir, func(o *Options) { o.Logger = quietLog })
			defer b.Close()
			path := filepath.Join(dir, InstanceFile)
			if err := os.WriteFile(path, []byte("not an id\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			id, err := b.InstanceID()
			if err != nil {
				t.Fatal(err)
			}
			data, _ := os.ReadFile(path)
			if string(data) != hex.EncodeToString(id[:])+"\n" {
				t.Fatalf("file holds %q for id %x", data, id)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, t.TempDir()) })
	}
}
