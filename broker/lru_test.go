package broker

import (
	"context"
	"fmt"
	"testing"
	"time"
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
