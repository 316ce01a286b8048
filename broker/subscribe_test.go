package broker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/protocol"
)

func subIDs(t *testing.T, area []byte, n int) []int64 {
	t.Helper()
	msgs, err := protocol.ParseSubMessages(area, n)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int64, len(msgs))
	for i, m := range msgs {
		ids[i] = m.EventID
	}
	return ids
}

func TestSubscribeReadsAcrossFilesAndWaits(t *testing.T) {
	ctx := context.Background()
	b := openTest(t, t.TempDir(), func(o *Options) { o.MaxLogSize = 300 })
	defer b.Close()
	b.CreateTopic(ctx, []byte("t"), 0)
	b.CreateTopic(ctx, []byte("other"), 0)
	var want []int64
	for i := 0; i < 40; i++ {
		id, err := b.Publish(ctx, []byte("t"), rec(fmt.Sprintf("m%02d", i)), 1)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, id)
		b.Publish(ctx, []byte("other"), rec("o"), 1)
	}
	for _, tc := range []struct {
		after int64
		batch int
	}{{0, 1}, {0, 7}, {0, 255}, {want[10], 3}, {want[10] + 1, 5}, {want[39], 1}} {
		s, err := b.Subscribe([]byte("t"), []byte("w"), tc.after)
		if err != nil {
			t.Fatal(err)
		}
		var got []int64
		for {
			area, n, err := s.Next(ctx, nil, tc.batch, 20*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				break
			}
			if n > tc.batch {
				t.Fatalf("frame of %d > batch %d", n, tc.batch)
			}
			got = append(got, subIDs(t, area, n)...)
		}
		s.Close()
		var exp []int64
		for _, id := range want {
			if id > tc.after {
				exp = append(exp, id)
			}
		}
		if !equalIDs(got, exp) {
			t.Fatalf("after %d batch %d: got %v want %v", tc.after, tc.batch, got, exp)
		}
	}
	// Exclusivity and release.
	s1, err := b.Subscribe([]byte("t"), []byte("w1"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Subscribe([]byte("t"), []byte("w1"), 0); err == nil || err.Error() != "w1 regiester exist" {
		t.Fatalf("second subscriber: %v", err)
	}
	s1.Close()
	s2, err := b.Subscribe([]byte("t"), []byte("w1"), want[39])
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	// Live: a waiting reader is woken by the next commit.
	done := make(chan []int64)
	go func() {
		area, n, err := s2.Next(ctx, nil, 10, 10*time.Second)
		if err != nil {
			t.Error(err)
		}
		done <- subIDs(t, area, n)
	}()
	id, _ := b.Publish(ctx, []byte("t"), rec("live"), 1)
	select {
	case got := <-done:
		if len(got) != 1 || got[0] != id {
			t.Fatalf("live got %v want %d", got, id)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("live message not delivered")
	}
	// Delete wakes the waiter with ErrTopicDeleted.
	errc := make(chan error)
	go func() {
		_, _, err := s2.Next(ctx, nil, 10, 10*time.Second)
		errc <- err
	}()
	b.DeleteTopic(ctx, []byte("t"))
	select {
	case err := <-errc:
		if !errors.Is(err, protocol.ErrTopicDeleted) {
			t.Fatalf("after delete: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("delete did not wake the subscriber")
	}
	s2.Close()
	if _, err := b.Subscribe([]byte("other"), []byte("w"), b.LastEventID()+1); err == nil || !strings.Contains(err.Error(), "beyond the last eventId") {
		t.Fatalf("subscribe past the end: %v", err)
	}
}
