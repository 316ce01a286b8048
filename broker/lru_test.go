package broker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/smssmq/smss/segment"
)

// TestOpenTopicLRU: with more topics written than MaxOpenTopics, the least
// recently written ones are closed and reopened by their next write; every
// message stays readable in order, at every flush level.
func TestOpenTopicLRU(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name          string
		flush, open   int
		topics, round int
	}{
		{"flush0", 0, 2, 7, 5},
		{"flush1", 1, 3, 10, 5},
		{"flush2", 2, 1, 4, 6},
		{"fits", 1, 10, 5, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			b := openTest(t, dir, func(o *Options) { o.FlushLevel, o.MaxOpenTopics = tc.flush, tc.open })
			for i := range tc.topics {
				if _, err := b.CreateTopic(ctx, []byte(fmt.Sprintf("t%d", i)), 0); err != nil {
					t.Fatal(err)
				}
			}
			for r := range tc.round {
				for i := range tc.topics {
					if _, err := b.Publish(ctx, []byte(fmt.Sprintf("t%d", i)), rec(fmt.Sprintf("r%d", r)), 1); err != nil {
						t.Fatal(err)
					}
				}
			}
			for i := range tc.topics {
				s, err := b.Subscribe([]byte(fmt.Sprintf("t%d", i)), []byte("w"), 0)
				if err != nil {
					t.Fatal(err)
				}
				area, n, err := s.Next(ctx, nil, 255, time.Second)
				s.Close()
				if err != nil || n != tc.round {
					t.Fatalf("topic t%d: %d messages, %v; want %d", i, n, err, tc.round)
				}
				_ = area
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			// And on disk, after a restart.
			for i := range tc.topics {
				ids, recs := readTopic(t, dir, fmt.Sprintf("t%d", i))
				if len(ids) != tc.round {
					t.Fatalf("topic t%d on disk: %d blocks, want %d", i, len(ids), tc.round)
				}
				for r, raw := range recs {
					if want := rec(fmt.Sprintf("r%d", r)); string(raw) != string(want) {
						t.Fatalf("topic t%d block %d: %q", i, r, raw)
					}
				}
			}
		})
	}
}

// TestDescriptorLimitOnReopen: a write whose topic file must be reopened
// (closed by the open-topic LRU) while the process is out of descriptors is
// refused with ErrDescriptorLimit - the reason, without the server's paths
// - and rolled back; once descriptors are back, writes succeed and exactly
// the acknowledged messages are stored. (e2e/security TestDescriptorLimitAnswers met
// the raw "segment: open dir ...: too many open files" here.)
func TestDescriptorLimitOnReopen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	var out atomic.Bool
	b := openTest(t, dir, func(o *Options) {
		o.MaxOpenTopics, o.Logger = 1, quietLog
		o.OpenFile = func(path string, flag int, perm os.FileMode) (segment.File, error) {
			if out.Load() && strings.Contains(path, string(filepath.Separator)+"topic"+string(filepath.Separator)) {
				return nil, &os.PathError{Op: "open", Path: path, Err: syscall.EMFILE}
			}
			return os.OpenFile(path, flag, perm)
		}
	})
	for _, name := range []string{"a", "b"} {
		if _, err := b.CreateTopic(ctx, []byte(name), 0); err != nil {
			t.Fatal(err)
		}
	}
	mustPub := func(topic, body string) {
		t.Helper()
		if _, err := b.Publish(ctx, []byte(topic), rec(body), 1); err != nil {
			t.Fatalf("publish %s to %s: %v", body, topic, err)
		}
	}
	mustPub("a", "a1")
	mustPub("b", "b1") // closes a's file: one open topic at most
	out.Store(true)
	_, err := b.Publish(ctx, []byte("a"), rec("refused"), 1)
	if !errors.Is(err, ErrDescriptorLimit) || strings.Contains(err.Error(), dir) {
		t.Fatalf("publish needing a reopen at the descriptor limit: %v, want ErrDescriptorLimit without the server's paths", err)
	}
	out.Store(false)
	mustPub("a", "a2")
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	_, recs := readTopic(t, dir, "a")
	if got, want := fmt.Sprint(recs), fmt.Sprint([][]byte{rec("a1"), rec("a2")}); got != want {
		t.Fatalf("topic a on disk: %s, want a1 and a2 only (%s)", got, want)
	}
}
