package broker

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/smssmq/smss/topicblock"
)

// served is what a store serves: for each start eventId, the messages a
// subscriber of each topic gets and the blocks a replica gets.
func served(t *testing.T, dir string, lastID int64) []string {
	t.Helper()
	b, err := Open(Options{Dir: dir, FlushLevel: 1, Logger: quietLog})
	if err != nil {
		t.Fatalf("start-up: %v", err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []string
	for after := int64(0); after <= lastID; after += 7 {
		for _, name := range []string{"a", "b"} {
			s, err := b.Subscribe([]byte(name), []byte("w"), after)
			if err != nil {
				out = append(out, fmt.Sprintf("sub %s after %d: %v", name, after, err))
				continue
			}
			for {
				area, n, err := s.Next(ctx, nil, 100, 0)
				if err != nil {
					t.Fatalf("sub %s after %d: %v", name, after, err)
				}
				if n == 0 {
					break
				}
				out = append(out, fmt.Sprintf("sub %s after %d: %x", name, after, area))
			}
			s.Close()
		}
		rs, err := b.ReplicaStream(after)
		if err != nil {
			out = append(out, fmt.Sprintf("replica after %d: %v", after, err))
			continue
		}
		for {
			n, err := rs.Next(ctx, 100, time.Millisecond, func(raw []byte) error {
				out = append(out, fmt.Sprintf("replica after %d: %x", after, raw))
				return nil
			})
			if err != nil {
				t.Fatalf("replica after %d: %v", after, err)
			}
			if n == 0 {
				break
			}
		}
		rs.Close()
	}
	return out
}

// TestIndexDamageServesTheSame damages every index file of the binlog and
// of the topics at once, in several ways, and checks that subscribers and
// replicas starting at any eventId are served exactly what an undamaged
// copy serves. segment.TestIndexDamageNeverChangesLookups covers single
// bit flips in detail.
func TestIndexDamageServesTheSame(t *testing.T) {
	cb := newCorruptBase(t)
	clean := served(t, cb.copyWithCheckpoint(t, false), cb.lastID)
	for _, tc := range []struct {
		name   string
		damage func(idx []byte) []byte // nil: remove the file
	}{
		{"removed", nil},
		{"zero-filled", func(b []byte) []byte { return make([]byte, len(b)) }},
		{"garbage", func(b []byte) []byte { return bytes.Repeat([]byte{0x5a}, len(b)+5) }},
		{"middle bit flipped", func(b []byte) []byte {
			c := append([]byte(nil), b...)
			if len(c) > 0 {
				c[len(c)/2] ^= 0x10
			}
			return c
		}},
		{"top offset bit flipped", func(b []byte) []byte {
			c := append([]byte(nil), b...)
			for i := 15; i < len(c); i += 16 {
				c[i] ^= 0x80
			}
			return c
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := cb.copyWithCheckpoint(t, false)
			idx, err := filepath.Glob(filepath.Join(dir, "binlog", "*.idx"))
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"a", "b"} {
				more, _ := filepath.Glob(filepath.Join(topicblock.Dir(filepath.Join(dir, "topic"), []byte(name), 10), "*.idx"))
				idx = append(idx, more...)
			}
			if len(idx) < 6 {
				t.Fatalf("only %d index files", len(idx))
			}
			for _, p := range idx {
				if tc.damage == nil {
					os.Remove(p)
					continue
				}
				data, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, tc.damage(data), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got := served(t, dir, cb.lastID)
			if len(got) != len(clean) {
				t.Fatalf("%d units served, %d from the undamaged copy", len(got), len(clean))
			}
			for i := range got {
				if got[i] != clean[i] {
					t.Fatalf("unit %d differs:\n got %.200s\nwant %.200s", i, got[i], clean[i])
				}
			}
		})
	}
}
