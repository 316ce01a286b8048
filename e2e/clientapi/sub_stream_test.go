package clientapi

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smssmq/smss/e2e/internal/kit"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
)

// TestSubStoredData reads a stored topic whose messages span several files,
// from 0 and from the middle, with batch 1, 10 and 255, and checks every
// frame byte for byte against what was published and how it is stored.
func TestSubStoredData(t *testing.T) {
	dir := t.TempDir()
	kit.WriteConfig(t, dir, streamConfig(32<<10, 200))
	p := kit.Start(t, dir)
	pub := kit.NewPublisher(t, p.Addr)
	pub.Create("a")
	pub.Create("b")
	// Small messages first (over 255 per file, so batch 255 fills frames),
	// then large ones (many file ends); topic b interleaves ids that are
	// not messages of a.
	var bIDs []int64
	for i := 0; i < 900; i += 1 + i%6 {
		var recs [][]byte
		for j := 0; j <= i%6 && i+j < 900; j++ {
			size := 6
			if i+j >= 700 {
				size = 1500
			}
			recs = append(recs, testRecord(i+j, size))
		}
		pub.Pub("a", recs...)
		if i%4 == 0 {
			bIDs = append(bIDs, pub.NextID)
			pub.Pub("b", testRecord(i, 40))
		}
	}
	all := pub.Topics["a"]
	layout := topicLayout(t, filepath.Join(dir, "data"), "a")
	files := map[int64]bool{}
	var fileEnds []int64 // ids of messages that end a file that has a successor
	for id, pl := range layout {
		files[pl.fileID] = true
		if pl.atFileEnd && pl.laterFiles {
			fileEnds = append(fileEnds, id)
		}
	}
	slices.Sort(fileEnds)
	if len(layout) != len(all) || len(files) < 4 {
		t.Fatalf("layout: %d blocks in %d files for %d messages", len(layout), len(files), len(all))
	}
	// from returns the messages after id.
	from := func(after int64) []kit.Sent {
		for i, s := range all {
			if s.ID > after {
				return all[i:]
			}
		}
		return nil
	}
	middle := all[len(all)/2].ID
	starts := map[string]int64{
		"from 0":                    0,
		"from the middle":           middle,
		"from a b message":          bIDs[len(bIDs)/3],
		"from a file's last block":  fileEnds[0],
		"from the create of a":      1,
		"from the second last file": fileEnds[len(fileEnds)-1],
	}
	who := 0
	for name, after := range starts {
		for _, batch := range []uint8{1, 10, 255} {
			t.Run(fmt.Sprintf("%s batch %d", name, batch), func(t *testing.T) {
				who++
				want := from(after)
				c := kit.Dial(t, p.Addr)
				if err := c.Sub("a", fmt.Sprint("w", who), after, batch, 5*time.Second); err != nil {
					t.Fatal(err)
				}
				last, got := after, 0
				rolled, full := 0, false // frames ending a rolled file; any full frame
				for frames := 0; got < len(want); frames++ {
					u, err := c.Next(kit.UnitWait)
					if err != nil {
						t.Fatalf("after %d of %d messages: %v", got, len(want), err)
					}
					if err := checkFrame(u, want, layout, int(batch), &last, &got); err != nil {
						t.Fatalf("frame %d: %v", frames, err)
					}
					if u.Msgs[len(u.Msgs)-1].NextPos == 0 {
						rolled++
					}
					full = full || len(u.Msgs) == int(batch)
					code := uint16(0)
					if got == len(want) {
						code = 1
					}
					if err := c.Ack(code); err != nil {
						t.Fatal(err)
					}
				}
				if err := c.InSync(); err != nil {
					t.Fatalf("after ack 1: %v", err)
				}
				// Every file end after the start closes a frame with
				// (next file, 0); every message was checked above.
				wantRolled := 0
				for _, id := range fileEnds {
					if id > after {
						wantRolled++
					}
				}
				if rolled != wantRolled {
					t.Fatalf("%d frames ended a rolled file, want %d", rolled, wantRolled)
				}
				if after == 0 && !full {
					t.Fatalf("no full frame of %d", batch)
				}
			})
		}
	}

	t.Run("resume after ack 1 on the same connection", func(t *testing.T) {
		c := kit.Dial(t, p.Addr)
		last, got, want := int64(0), 0, all
		for round := 0; got < len(want); round++ {
			// Each round takes three frames, ends with ack 1, and
			// resubscribes from the last eventId it consumed.
			if err := c.Sub("a", "resumer", last, 50, 5*time.Second); err != nil {
				t.Fatal(err)
			}
			for f := 0; f < 3 && got < len(want); f++ {
				u, err := c.Next(kit.UnitWait)
				if err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				if err := checkFrame(u, want, layout, 50, &last, &got); err != nil {
					t.Fatalf("round %d frame %d: %v", round, f, err)
				}
				code := uint16(0)
				if f == 2 || got == len(want) {
					code = 1
				}
				if err := c.Ack(code); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := c.InSync(); err != nil {
			t.Fatalf("after the last ack 1: %v", err)
		}
	})
}

// TestSubLiveAndAlive: a caught-up subscriber gets alives at the configured
// interval, and a publish reaches it promptly.
func TestSubLiveAndAlive(t *testing.T) {
	dir := t.TempDir()
	kit.WriteConfig(t, dir, streamConfig(1<<20, 200))
	p := kit.Start(t, dir)
	pub := kit.NewPublisher(t, p.Addr)
	pub.Create("live")
	c := kit.Dial(t, p.Addr)
	if err := c.Sub("live", "w", 0, 10, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := 0; i < 3; i++ {
		u, err := c.Next(kit.UnitWait)
		if err != nil || u.Code != protocol.StatusAlive {
			t.Fatalf("alive %d: %v %v", i, u, err)
		}
	}
	if d := time.Since(start); d < 500*time.Millisecond || d > 3*time.Second {
		t.Fatalf("3 alives took %v with timeout.server.alive 200ms", d)
	}
	last, got := int64(0), 0
	for i := 0; i < 20; i++ {
		sentAt := time.Now()
		pub.Pub("live", testRecord(i, 100))
		u, err := c.NextData(2 * time.Second)
		if err != nil {
			t.Fatalf("message %d not delivered: %v", i, err)
		}
		if d := time.Since(sentAt); d > time.Second {
			t.Fatalf("message %d delivered after %v", i, d)
		}
		if err := checkFrame(u, pub.Topics["live"], topicLayout(t, filepath.Join(dir, "data"), "live"), 10, &last, &got); err != nil {
			t.Fatal(err)
		}
		if err := c.Ack(0); err != nil {
			t.Fatal(err)
		}
	}
	// A live frame acked with 1 and the next request in one write: the
	// watcher that was reading while the subscriber waited must leave both
	// intact.
	pub.Pub("live", testRecord(99, 100))
	if u, err := c.NextData(2 * time.Second); err != nil || len(u.Msgs) != 1 {
		t.Fatalf("last live frame: %v %v", u, err)
	}
	if _, err := c.C.Write(append([]byte{1, 0}, kit.Must(protocol.AppendTopicInfo(nil, []byte("live"), nil))...)); err != nil {
		t.Fatal(err)
	}
	if body, err := protocol.ReadReply(c.R, protocol.ReplyJSON, 1<<20); err != nil || !strings.Contains(string(body), `"name":"live"`) {
		t.Fatalf("info after ack 1: %q %v", body, err)
	}
}

// TestSubAckRules: ack timeout and invalid acks close the connection and
// free the who slot; ack 1 keeps it.
func TestSubAckRules(t *testing.T) {
	dir := t.TempDir()
	kit.WriteConfig(t, dir, streamConfig(1<<20, 200))
	p := kit.Start(t, dir)
	pub := kit.NewPublisher(t, p.Addr)
	pub.Create("ack")
	pub.Pub("ack", testRecord(1, 50), testRecord(2, 50))

	for _, tc := range []struct {
		name    string
		ack     []byte
		minWait time.Duration
	}{
		{"ack timeout 1s", nil, time.Second},
		{"invalid ack 2", []byte{2, 0}, 0},
		{"invalid ack 0x0100", []byte{0, 1}, 0},
		{"client sends a request instead of an ack", kit.Must(protocol.AppendAlive(nil, nil)), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := kit.Dial(t, p.Addr)
			// The ack timeout runs from the frame's write, which follows
			// the request: timed from before it, the lower bound holds
			// however late this goroutine reads the frame.
			start := time.Now()
			if err := c.Sub("ack", "w", 0, 1, time.Second); err != nil {
				t.Fatal(err)
			}
			if u, err := c.Next(kit.UnitWait); err != nil || len(u.Msgs) != 1 {
				t.Fatalf("first frame: %v %v", u, err)
			}
			if tc.ack != nil {
				if _, err := c.C.Write(tc.ack); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.ExpectEOF(kit.UnitWait); err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); d < tc.minWait || d > tc.minWait+2*time.Second {
				t.Fatalf("closed %v after the subscribe request, want about %v", d, tc.minWait)
			}
			// The slot is free once the server noticed: poll, never sleep.
			other := kit.Dial(t, p.Addr)
			var last string
			if !smsstest.Poll(2*time.Second, func() bool {
				if err := other.Sub("ack", "w", 2, 1, time.Second); err != nil {
					t.Fatal(err)
				}
				u, err := other.Next(kit.UnitWait)
				if err != nil {
					t.Fatal(err)
				}
				last = u.String()
				return u.Code != protocol.StatusError
			}) {
				t.Fatalf("who slot not freed: %s", last)
			}
			other.Ack(1)
			if err := other.InSync(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestSubExclusivityAndTakeover: one active subscriber per (topic, who);
// the slot is free as soon as the holder's connection ends, whether it was
// waiting for data or holding an unacknowledged frame.
func TestSubExclusivityAndTakeover(t *testing.T) {
	dir := t.TempDir()
	kit.WriteConfig(t, dir, streamConfig(1<<20, 30000))
	p := kit.Start(t, dir)
	pub := kit.NewPublisher(t, p.Addr)
	pub.Create("x")
	pub.Pub("x", testRecord(1, 50), testRecord(2, 50)) // eventIds 2 and 3

	for _, tc := range []struct {
		name  string
		after int64 // the holder's start
		ack   bool  // the holder acks its frame and waits for more
	}{
		{"holder waiting for data", 2, true},
		{"holder with an unacknowledged frame", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			holder := kit.Dial(t, p.Addr)
			if err := holder.Sub("x", "w1", tc.after, 1, time.Minute); err != nil {
				t.Fatal(err)
			}
			if u, err := holder.Next(kit.UnitWait); err != nil || len(u.Msgs) != 1 {
				t.Fatalf("holder's frame: %v %v", u, err)
			}
			if tc.ack {
				holder.Ack(0)
			}
			second := kit.Dial(t, p.Addr)
			try := func() kit.Unit {
				if err := second.Sub("x", "w1", 0, 1, time.Minute); err != nil {
					t.Fatal(err)
				}
				u, err := second.Next(kit.UnitWait)
				if err != nil {
					t.Fatal(err)
				}
				return u
			}
			if u := try(); u.Code != protocol.StatusError || u.Text != "w1 regiester exist" {
				t.Fatalf("second subscriber got %v while the first holds w1", u)
			}
			if err := second.InSync(); err != nil {
				t.Fatalf("connection unusable after the refusal: %v", err)
			}
			// Another who is independent.
			other := kit.Dial(t, p.Addr)
			if err := other.Sub("x", "w2", 0, 2, time.Second); err != nil {
				t.Fatal(err)
			}
			if u, err := other.Next(kit.UnitWait); err != nil || len(u.Msgs) != 2 {
				t.Fatalf("w2: %v %v", u, err)
			}
			other.Ack(1)

			holder.C.Close()
			closed := time.Now()
			var u kit.Unit
			// Freed by the server noticing the close, not by the holder's
			// 1-minute ack timeout: 10 s tells them apart with room for a
			// loaded machine.
			if !smsstest.Poll(10*time.Second, func() bool {
				u = try()
				return u.Code != protocol.StatusError
			}) {
				t.Fatalf("w1 not taken over within 10s of the holder closing: %v", u)
			}
			t.Logf("takeover %v after the holder closed", time.Since(closed))
			if len(u.Msgs) != 1 || u.Msgs[0].EventID != 2 {
				t.Fatalf("takeover got %v", u)
			}
			// Release w1 for the next case: the 201 comes after the
			// subscription ended.
			second.Ack(1)
			if err := second.InSync(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestSubRefusals(t *testing.T) {
	dir := t.TempDir()
	kit.WriteConfig(t, dir, "")
	p := kit.Start(t, dir)
	pub := kit.NewPublisher(t, p.Addr)
	pub.Create("r")
	pub.Pub("r", testRecord(1, 10))
	c := kit.Dial(t, p.Addr)
	for _, tc := range []struct {
		topic string
		after int64
		want  string
	}{
		{"r", 3, "eventId 3 is beyond the last eventId 2 of this server"},
		{"r", 1 << 40, "eventId 1099511627776 is beyond the last eventId 2 of this server"},
		{"r", -2, "invalid eventId -2: must be >= 0"}, // -1 resumes (stored positions)
		{"nope", 0, "topic not exist"},
		{"a/b", 0, "invalid topic name"},
	} {
		if err := c.Sub(tc.topic, "w", tc.after, 1, time.Second); err != nil {
			t.Fatal(err)
		}
		u, err := c.Next(kit.UnitWait)
		if err != nil || u.Code != protocol.StatusError || !strings.HasPrefix(u.Text, tc.want) {
			t.Fatalf("sub %s after %d: %v %v, want 400 %q", tc.topic, tc.after, u, err, tc.want)
		}
	}
	if err := c.InSync(); err != nil {
		t.Fatal(err)
	}
	// The last eventId itself is accepted: nothing to deliver yet.
	if err := c.Sub("r", "w", 2, 1, time.Second); err != nil {
		t.Fatal(err)
	}
	pub.Pub("r", testRecord(2, 10))
	if u, err := c.NextData(kit.UnitWait); err != nil || len(u.Msgs) != 1 || u.Msgs[0].EventID != 3 {
		t.Fatalf("sub from the last eventId: %v %v", u, err)
	}
}

// TestSubDeleteWithTenSubscribers: every subscriber of a deleted topic gets
// 255 within 1 s and its connection stays usable, while publishes to
// another topic keep being accepted.
func TestSubDeleteWithTenSubscribers(t *testing.T) {
	dir := t.TempDir()
	kit.WriteConfig(t, dir, streamConfig(1<<20, 30000))
	p := kit.Start(t, dir)
	pub := kit.NewPublisher(t, p.Addr)
	pub.Create("doomed")
	pub.Create("other")
	pub.Pub("doomed", testRecord(1, 30), testRecord(2, 30))

	subs := make([]*kit.Client, 10)
	for i := range subs {
		subs[i] = kit.Dial(t, p.Addr)
		if err := subs[i].Sub("doomed", fmt.Sprint("w", i), 0, uint8(1+i%3), 5*time.Second); err != nil {
			t.Fatal(err)
		}
		for got := 0; got < 2; {
			u, err := subs[i].Next(kit.UnitWait)
			if err != nil || u.Code != protocol.StatusOK {
				t.Fatalf("subscriber %d: %v %v", i, u, err)
			}
			got += len(u.Msgs)
			subs[i].Ack(0)
		}
	}

	// A publisher on the other topic runs throughout.
	stop := make(chan struct{})
	var (
		wg         sync.WaitGroup
		pubs       atomic.Int64
		slowest    time.Duration // read after wg.Wait
		pubErr     error         // read after wg.Wait
		other      = kit.Dial(t, p.Addr)
		otherReady = make(chan struct{})
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			t0 := time.Now()
			if err := other.Pub("other", testRecord(i, 30)); err != nil {
				pubErr = err
				return
			}
			slowest = max(slowest, time.Since(t0))
			if pubs.Add(1) == 5 {
				close(otherReady)
			}
		}
	}()
	<-otherReady

	deleter := kit.Dial(t, p.Addr)
	t0 := time.Now()
	if err := deleter.Del("doomed"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	t.Logf("delete replied after %v", time.Since(t0))
	var ends sync.WaitGroup
	errs := make(chan error, len(subs))
	for i, c := range subs {
		ends.Add(1)
		go func() {
			defer ends.Done()
			u, err := c.Next(time.Second - time.Since(t0))
			if err != nil || u.Code != protocol.StatusSubEnd {
				errs <- fmt.Errorf("subscriber %d: %v %v, want 255 within 1s of the delete", i, u, err)
				return
			}
			if err := c.InSync(); err != nil {
				errs <- fmt.Errorf("subscriber %d after 255: %v", i, err)
			}
		}()
	}
	ends.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("all 255s within %v", time.Since(t0))
	before := pubs.Load()
	stalled := !smsstest.Poll(2*time.Second, func() bool { return pubs.Load() > before+5 })
	close(stop)
	wg.Wait()
	if pubErr != nil {
		t.Fatalf("publish to the other topic: %v", pubErr)
	}
	if stalled {
		t.Fatal("publishes to another topic stalled after the delete")
	}
	if slowest > time.Second {
		t.Fatalf("a publish to the other topic took %v", slowest)
	}
}

// TestSubHundredSubscribers: 100 subscribers of one topic, started while
// messages are being published, each receive every message in order.
func TestSubHundredSubscribers(t *testing.T) {
	dir := t.TempDir()
	// The ids of the messages are predicted (below): the subscribers'
	// positions, written to __cursors as a pub of one record each, must
	// not be flushed while the publisher runs (cursor.flushMs 1000 did so
	// on a loaded machine, taking 101 eventIds). Each subscription's
	// position is still written when it ends.
	kit.WriteConfig(t, dir, streamConfig(64<<10, 200)+"cursor:\n  flushMs: 600000\n")
	p := kit.Start(t, dir)
	pub := kit.NewPublisher(t, p.Addr)
	pub.Create("many")
	for i := 0; i < 100; i++ {
		pub.Pub("many", testRecord(i, 200), testRecord(i+1000, 200))
	}
	const subscribers, total = 100, 500
	// Ids are predicted before publishing, so subscribers can check them
	// while the publisher runs.
	var want []kit.Sent
	for i := range total {
		if i < 200 {
			want = append(want, pub.Topics["many"][i])
			continue
		}
		want = append(want, kit.Sent{ID: pub.NextID + int64(i-200), Rec: testRecord(i, 200)})
	}
	var wg sync.WaitGroup
	errs := make(chan error, subscribers)
	for s := 0; s < subscribers; s++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- func() error {
				c := kit.Dial(t, p.Addr)
				if err := c.Sub("many", fmt.Sprint("w", s), 0, uint8(1+s%32), 5*time.Second); err != nil {
					return err
				}
				got := 0
				for got < total {
					u, err := c.NextData(kit.UnitWait)
					if err != nil {
						return fmt.Errorf("subscriber %d after %d messages: %v", s, got, err)
					}
					for _, m := range u.Msgs {
						if got >= total || m.EventID != want[got].ID || string(m.Raw) != string(want[got].Rec) {
							return fmt.Errorf("subscriber %d message %d: eventId %d", s, got, m.EventID)
						}
						got++
					}
					code := uint16(0)
					if got == total {
						code = 1
					}
					if err := c.Ack(code); err != nil {
						return err
					}
				}
				return c.InSync()
			}()
		}()
	}
	for i := 200; i < total; i++ {
		pub.Pub("many", testRecord(i, 200))
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}
