package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/smssmq/smss/protocol"
)

// floorModes are the shapes of the floor server: the connection goroutine
// replies itself, one writer goroutine, leader/follower writes, one epoll
// thread (Linux only).
func floorModes() []string {
	modes := []string{"direct", "writer", "leader"}
	if runtime.GOOS == "linux" {
		modes = append(modes, "epoll")
	}
	return modes
}

// startFloor serves a floor server in mode on a free port for the test's
// duration; every mode but direct writes its groups into w.
func startFloor(t *testing.T, mode string, w io.Writer) (string, *floorServer) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := newFloor(ln)
	switch mode {
	case "direct":
	case "writer":
		fl.startWriter(w)
	case "leader":
		fl.leader = &floorLeader{w: w, groups: &fl.groups}
	case "epoll":
		if err := fl.startEpoll(w); err != nil {
			ln.Close()
			t.Fatal(err)
		}
	default:
		t.Fatalf("unknown floor mode %q", mode)
	}
	return serveFloorForTest(t, fl), fl
}

// serveFloorForTest serves fl until the test ends, then closes it and
// waits for its connections; it returns fl's address.
func serveFloorForTest(t *testing.T, fl *floorServer) string {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fl.serve()
	}()
	t.Cleanup(func() {
		fl.close()
		<-done
	})
	return fl.ln.Addr().String()
}

// TestFloorE2E runs the e2e workload and a 16-connection publish against
// every mode of the floor server: every message must arrive with its stamp,
// also when one publish carries more records than one frame may hold (255);
// a mode with a writer must have written every publish twice, and the
// grouping modes must have written some publishes of different connections
// as one group.
func TestFloorE2E(t *testing.T) {
	pid := strconv.Itoa(os.Getpid())
	for _, mode := range floorModes() {
		var file bytes.Buffer // read only after the server has stopped
		var groups, pubs int64
		t.Run(mode, func(t *testing.T) {
			var total int64
			t.Run("servers", func(t *testing.T) {
				addr, fl := startFloor(t, mode, &file)
				for _, tc := range []struct{ records, count int }{{1, 200}, {300, 1200}} {
					var r Result
					benchJSON(t, &r, "e2e", "--addr", addr, "--pid", pid, "--topic", "floor"+strconv.Itoa(tc.records),
						"--records", strconv.Itoa(tc.records), "--rate", "10000", "--count", strconv.Itoa(tc.count))
					if r.Messages != int64(tc.count) || r.Latency == nil || r.Latency.Count != uint64(tc.count) {
						t.Fatalf("%d records per publish: %d messages, latency %+v; want %d", tc.records, r.Messages, r.Latency, tc.count)
					}
					total += r.Messages
					pubs += int64(tc.count / tc.records)
				}
				const concurrent = 3000
				var r Result
				benchJSON(t, &r, "pub", "--addr", addr, "--pid", pid, "--topic", "floorconns",
					"--conns", "16", "--count", strconv.Itoa(concurrent))
				if r.Messages != concurrent {
					t.Fatalf("16 connections: %d messages, want %d", r.Messages, concurrent)
				}
				total += r.Messages
				pubs += concurrent
				groups = fl.groups.Load()
			})
			// Each record is the 8-byte prefix and a 200-byte body.
			want := 2 * total * (protocol.RecordPrefixSize + 200)
			if mode == "direct" {
				want = 0
			}
			if int64(file.Len()) != want {
				t.Fatalf("%s wrote %d bytes, want %d", mode, file.Len(), want)
			}
			// (--leader's grouping depends on timing here; TestFloorLeaderGroups
			// forces it.)
			if mode == "epoll" && (groups == 0 || groups >= pubs) {
				t.Fatalf("%s: %d groups for %d publishes; want fewer groups than publishes", mode, groups, pubs)
			}
			t.Logf("%s: %d groups for %d publishes", mode, groups, pubs)
		})
	}
}

// TestFloorRefuses answers what the floor server does not implement with an
// error reply, not silence or a dropped connection, in every mode.
func TestFloorRefuses(t *testing.T) {
	for _, mode := range floorModes() {
		t.Run(mode, func(t *testing.T) {
			addr, _ := startFloor(t, mode, io.Discard)
			c, err := dialSmss(addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.close()
			create, _ := protocol.AppendCreate(nil, []byte("t"), nil, 0)
			del, _ := protocol.AppendDelete(nil, []byte("t"), nil)
			for _, step := range []struct {
				name    string
				req     []byte
				refused bool
			}{
				{"delete", del, true},
				{"create", create, false}, // the connection is still usable
				{"delete again", del, true},
			} {
				if err := c.roundTrip(step.req); (err != nil) != step.refused {
					t.Fatalf("%s: %v", step.name, err)
				}
			}
		})
	}
}

// gateWriter holds its first write until release is closed.
type gateWriter struct {
	entered chan struct{}
	release chan struct{}
	once    sync.Once
	buf     bytes.Buffer
}

func (g *gateWriter) Write(b []byte) (int, error) {
	g.once.Do(func() {
		close(g.entered)
		<-g.release
	})
	return g.buf.Write(b)
}

// TestFloorLeaderGroups: while a leader writes, the publishes arriving
// meanwhile queue; the leader hands over to the first of them, which writes
// them all as one group and wakes the others, every one answered OK.
func TestFloorLeaderGroups(t *testing.T) {
	rec, err := protocol.AppendRecord(nil, protocol.Record{Body: make([]byte, 200)})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := protocol.AppendPub(nil, []byte("t"), nil, rec)
	if err != nil {
		t.Fatal(err)
	}
	gate := &gateWriter{entered: make(chan struct{}), release: make(chan struct{})}
	addr, fl := startFloor(t, "leader", gate)
	const followers = 7
	errs := make(chan error, followers+1)
	publish := func() {
		c, err := dialSmss(addr)
		if err != nil {
			errs <- err
			return
		}
		defer c.close()
		errs <- c.roundTrip(pub)
	}
	go publish() // the first leader, held in its write
	select {
	case <-gate.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the first publish never reached the writer")
	}
	for range followers {
		go publish()
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		fl.leader.mu.Lock()
		queued := len(fl.leader.queue)
		fl.leader.mu.Unlock()
		if queued == followers {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d publishes queued behind the leader, want %d", queued, followers)
		}
		runtime.Gosched()
	}
	close(gate.release)
	for range followers + 1 {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a publisher was never answered")
		}
	}
	if g := fl.groups.Load(); g != 2 {
		t.Fatalf("%d groups, want 2: the leader's own publish, then the %d queued behind it as one", g, followers)
	}
	// The last leader took mu after its write: taking it orders the read.
	fl.leader.mu.Lock()
	written := gate.buf.Len()
	fl.leader.mu.Unlock()
	if want := 2 * (followers + 1) * len(rec); written != want {
		t.Fatalf("wrote %d bytes, want %d", written, want)
	}
}

// failWriter fails every write, as a full disk would.
type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// TestFloorWriteFails: when a group's write fails, no publisher of the
// group, leader or follower, is told its publish succeeded.
func TestFloorWriteFails(t *testing.T) {
	rec, err := protocol.AppendRecord(nil, protocol.Record{Body: make([]byte, 200)})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := protocol.AppendPub(nil, []byte("t"), nil, rec)
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"writer", "leader", "epoll"} {
		if mode == "epoll" && runtime.GOOS != "linux" {
			continue
		}
		t.Run(mode, func(t *testing.T) {
			addr, _ := startFloor(t, mode, failWriter{})
			const conns, each = 8, 20
			var wg sync.WaitGroup
			errs := make(chan error, conns*each)
			for range conns {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c, err := dialSmss(addr)
					if err != nil {
						errs <- err
						return
					}
					defer c.close()
					for range each {
						if err := c.roundTrip(pub); err == nil {
							errs <- errors.New("a publish whose write failed was answered OK")
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
		})
	}
}

// TestFloorFlagsExclusive: the modes are one at a time; asking for two is
// a usage error, not one silently winning.
func TestFloorFlagsExclusive(t *testing.T) {
	for _, args := range [][]string{
		{"--writer", "--leader"},
		{"--leader", "--epoll"},
		{"--writer", "--epoll"},
	} {
		var stdout, stderr bytes.Buffer
		if code := runFloor(t.Context(), append([]string{"--listen", "127.0.0.1:0"}, args...), &stdout, &stderr); code != 2 {
			t.Fatalf("%v: exit %d, want 2 (%s)", args, code, stderr.String())
		}
	}
}

// TestFloorHoldsForFirstSubscriber: publishes the server reads before the
// topic's first subscription (a run opens its subscription first, but
// another connection may be read before it) are handed to that
// subscriber, not lost, in every mode.
func TestFloorHoldsForFirstSubscriber(t *testing.T) {
	for _, mode := range floorModes() {
		t.Run(mode, func(t *testing.T) {
			var file bytes.Buffer
			addr, _ := startFloor(t, mode, &file)
			pc, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer pc.Close()
			pc.SetDeadline(time.Now().Add(10 * time.Second))
			var recs []byte
			for _, b := range []string{"one", "two"} {
				if recs, err = protocol.AppendRecord(recs, protocol.Record{Body: []byte(b)}); err != nil {
					t.Fatal(err)
				}
			}
			req, err := protocol.AppendPub(nil, []byte("early"), nil, recs)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := pc.Write(req); err != nil {
				t.Fatal(err)
			}
			if _, err := protocol.ReadReply(bufio.NewReader(pc), protocol.ReplyPlain, 0); err != nil {
				t.Fatalf("publish before any subscriber: %v", err)
			}
			sc, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer sc.Close()
			sc.SetDeadline(time.Now().Add(10 * time.Second))
			sub, err := protocol.AppendSub(nil, []byte("early"), nil, 0, 10, time.Second, []byte("w"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sc.Write(sub); err != nil {
				t.Fatal(err)
			}
			var h protocol.RespHeader
			br := bufio.NewReader(sc)
			if _, err := io.ReadFull(br, h[:]); err != nil || h.Code() != protocol.StatusOK || h.FrameCount() != 2 {
				t.Fatalf("first unit to the first subscriber: % x %v, want a frame of the 2 held messages", h, err)
			}
		})
	}
}
