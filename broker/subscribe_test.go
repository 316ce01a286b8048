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

// TestSubscribeFramesBoundedByBytes: a frame takes messages while their
// units stay within Options.MaxFrameBytes; a larger message goes alone.
// Frames used to be bounded by count only (64 messages of 8 MiB made one
// 512 MiB frame).
func TestSubscribeFramesBoundedByBytes(t *testing.T) {
	ctx := context.Background()
	unit := func(body int) int { return protocol.SubMessageFixedSize + len(rec(strings.Repeat("x", body))) }
	for _, tc := range []struct {
		name   string
		bodies []int // message body sizes, published in order
		limit  int
		batch  int
		frames []int // messages per frame
	}{
		{"count bound first", []int{10, 10, 10, 10}, 1 << 20, 3, []int{3, 1}},
		{"exact fit", []int{100, 100, 100, 100}, 2 * unit(100), 255, []int{2, 2}},
		{"one byte short", []int{100, 100, 100}, 2*unit(100) - 1, 255, []int{1, 1, 1}},
		{"large alone", []int{10, 5000, 10, 10}, 2048, 255, []int{1, 1, 2}},
		{"large first", []int{5000, 10}, 2048, 255, []int{1, 1}},
		{"many small", []int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, 4 * unit(1), 255, []int{4, 4, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := openTest(t, t.TempDir(), func(o *Options) { o.MaxFrameBytes = tc.limit })
			defer b.Close()
			if _, err := b.CreateTopic(ctx, []byte("t"), 0); err != nil {
				t.Fatal(err)
			}
			for i, n := range tc.bodies {
				body := fmt.Sprintf("%d", i) + strings.Repeat("x", n-1)
				if _, err := b.Publish(ctx, []byte("t"), rec(body), 1); err != nil {
					t.Fatal(err)
				}
			}
			s, err := b.Subscribe([]byte("t"), []byte("w"), 0)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var frames []int
			total := 0
			for total < len(tc.bodies) {
				area, n, err := s.Next(ctx, nil, tc.batch, 5*time.Second)
				if err != nil || n == 0 {
					t.Fatalf("after %d messages: n %d err %v", total, n, err)
				}
				if n > 1 && len(area) > tc.limit {
					t.Errorf("frame of %d messages has %d bytes > %d", n, len(area), tc.limit)
				}
				msgs, err := protocol.ParseSubMessages(area, n)
				if err != nil {
					t.Fatal(err)
				}
				for j, m := range msgs {
					if want := fmt.Sprint(total + j); !strings.HasPrefix(string(m.Body), want) || len(m.Body) != tc.bodies[total+j] {
						t.Fatalf("message %d: body %.10q of %d bytes", total+j, m.Body, len(m.Body))
					}
				}
				frames = append(frames, n)
				total += n
			}
			if fmt.Sprint(frames) != fmt.Sprint(tc.frames) {
				t.Errorf("frames %v, want %v", frames, tc.frames)
			}
		})
	}
}
