package main

// The replicated floor: the least a Go master and slave must do to answer
// a publish only once a second machine holds it, to tell what semi-
// synchronous replication costs by itself on this machine from what smss
// adds. `floor --replica` is the slave: it reads groups from one master,
// writes each twice to a temp file (binlog and topic file), fsyncs them
// with --fsync, and confirms the last group of each read with its 8-byte
// sequence number. `floor --writer --replicate-to ADDR` is the master: its
// writer goroutine (floor.go) hands each written group to a stream
// goroutine that sends everything queued in one write, and a reader
// goroutine takes the confirmations. With --sync a publish is answered
// once the group holding it is confirmed (and, with --fsync, fsynced on
// the master too; the group is sent before the master's fsync, so the two
// overlap); without it, once written, while the same stream and
// confirmations go on: the asynchronous case to compare with.
//
// The wire between the two is the stand-in's own, not smss's replica
// stream: a group is uint64 LE sequence | uint32 LE length | bytes, a
// confirmation uint64 LE sequence.
//
//	smss-bench floor --replica --listen 127.0.0.1:7001 [--fsync] &
//	smss-bench floor --writer --replicate-to 127.0.0.1:7001 [--sync] [--fsync] --listen 127.0.0.1:7000 &
//	smss-bench pub --addr 127.0.0.1:7000 --pid $! --conns 64

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
)

// floorGroupHeader is the size of a group's header on the stand-in's
// stream: sequence and length.
const floorGroupHeader = 12

// maxFloorGroup caps one group's length as the replica reads it.
const maxFloorGroup = 64 << 20

// floorStream is the master's side of the replicated floor.
type floorStream struct {
	c    net.Conn
	sync bool
	wake chan struct{} // capacity 1: the sender has something to send

	mu        sync.Mutex
	pending   []byte         // groups queued for the sender, framed
	waiting   []floorWaiting // sync: written groups awaiting confirmation, in sequence order
	confirmed int64          // the last sequence the replica confirmed
	err       error          // the stream failed: every waiting and later group fails with it
}

// floorWaiting is a group whose publishes are answered once the replica
// confirmed it.
type floorWaiting struct {
	seq   int64
	group []floorPub
}

// dialFloorStream connects to a floor replica at addr and starts the
// sender and the confirmation reader.
func dialFloorStream(addr string, syncAck bool) (*floorStream, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("floor: connect to the replica: %w", err)
	}
	s := &floorStream{c: c, sync: syncAck, wake: make(chan struct{}, 1)}
	go s.sender()
	go s.confirmations()
	return s, nil
}

// send queues group seq's bytes for the replica.
func (s *floorStream) send(seq int64, buf []byte) error {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return s.err
	}
	s.pending = binary.LittleEndian.AppendUint64(s.pending, uint64(seq))
	s.pending = binary.LittleEndian.AppendUint32(s.pending, uint32(len(buf)))
	s.pending = append(s.pending, buf...)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return nil
}

// await answers group's publishes once the replica confirmed seq (at once
// if it has); group is the stream's from now on.
func (s *floorStream) await(seq int64, group []floorPub) {
	s.mu.Lock()
	if s.err != nil || s.confirmed >= seq {
		err := s.err
		s.mu.Unlock()
		for _, p := range group {
			p.done <- err
		}
		return
	}
	s.waiting = append(s.waiting, floorWaiting{seq: seq, group: group})
	s.mu.Unlock()
}

// sender writes whatever is queued in one write each time it is woken.
func (s *floorStream) sender() {
	var out []byte
	for range s.wake {
		s.mu.Lock()
		out, s.pending = s.pending, out[:0]
		s.mu.Unlock()
		if len(out) == 0 {
			continue
		}
		if _, err := s.c.Write(out); err != nil {
			s.fail(fmt.Errorf("floor: send to the replica: %w", err))
			return
		}
	}
}

// confirmations reads the replica's confirmations and answers the groups
// they cover.
func (s *floorStream) confirmations() {
	r := bufio.NewReader(s.c)
	var b [8]byte
	var done []floorWaiting
	for {
		if _, err := io.ReadFull(r, b[:]); err != nil {
			s.fail(fmt.Errorf("floor: read the replica's confirmation: %w", err))
			return
		}
		seq := int64(binary.LittleEndian.Uint64(b[:]))
		s.mu.Lock()
		if seq > s.confirmed {
			s.confirmed = seq
		}
		n := 0
		for n < len(s.waiting) && s.waiting[n].seq <= seq {
			n++
		}
		done = append(done[:0], s.waiting[:n]...)
		s.waiting = append(s.waiting[:0], s.waiting[n:]...)
		s.mu.Unlock()
		for _, w := range done {
			for _, p := range w.group {
				p.done <- nil
			}
		}
	}
}

// fail ends the stream: waiting groups get err, later ones at once.
func (s *floorStream) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	waiting := s.waiting
	s.waiting = nil
	s.mu.Unlock()
	s.c.Close()
	for _, w := range waiting {
		for _, p := range w.group {
			p.done <- err
		}
	}
}

// close ends the stream once no group is sent any more.
func (s *floorStream) close() {
	s.fail(errors.New("floor: the server is stopping"))
	close(s.wake)
}

// serveFloorReplica is `floor --replica`: it serves masters one at a time
// until ctx ends, writing their groups to w (and fsyncing it with fsync).
// A master's connection failing ends that connection (said on stderr when
// it did not just close); failing to write w ends the replica.
func serveFloorReplica(ctx context.Context, ln net.Listener, w *os.File, fsync bool, stderr io.Writer) error {
	var mu sync.Mutex
	var cur net.Conn
	stop := context.AfterFunc(ctx, func() {
		ln.Close()
		mu.Lock()
		if cur != nil {
			cur.Close()
		}
		mu.Unlock()
	})
	defer stop()
	for {
		c, err := ln.Accept()
		if err != nil {
			return nil
		}
		mu.Lock()
		cur = c
		mu.Unlock()
		if ctx.Err() != nil {
			c.Close()
			return nil
		}
		err = floorApply(c, w, fsync)
		c.Close()
		switch {
		case errors.Is(err, errFloorFile):
			return err
		case err != nil && !errors.Is(err, io.EOF) && ctx.Err() == nil:
			fmt.Fprintln(stderr, "smss-bench floor replica: the master's stream ended:", err)
		}
	}
}

// errFloorFile: the replica could not write or fsync its file.
var errFloorFile = errors.New("floor replica: write the file")

// floorApply applies one master's stream: every group a read brought is
// written twice, fsynced with fsync, and confirmed with the last one's
// sequence number in one write: smss's slave apply step.
func floorApply(c net.Conn, w *os.File, fsync bool) error {
	r := bufio.NewReaderSize(c, 1<<20)
	var hdr [floorGroupHeader]byte
	var buf, conf []byte
	for {
		buf = buf[:0]
		var last uint64
		for first := true; first || r.Buffered() >= floorGroupHeader; first = false {
			if _, err := io.ReadFull(r, hdr[:]); err != nil {
				return err
			}
			n := binary.LittleEndian.Uint32(hdr[8:])
			if n > maxFloorGroup {
				return fmt.Errorf("floor replica: a group of %d bytes, over the cap %d", n, maxFloorGroup)
			}
			last = binary.LittleEndian.Uint64(hdr[:8])
			start := len(buf)
			buf = slices.Grow(buf, int(n))[:start+int(n)]
			if _, err := io.ReadFull(r, buf[start:]); err != nil {
				return err
			}
		}
		if _, err := w.Write(buf); err != nil { // the binlog's copy
			return fmt.Errorf("%w: %w", errFloorFile, err)
		}
		if _, err := w.Write(buf); err != nil { // the topic file's
			return fmt.Errorf("%w: %w", errFloorFile, err)
		}
		if fsync {
			if err := w.Sync(); err != nil {
				return fmt.Errorf("%w: %w", errFloorFile, err)
			}
		}
		conf = binary.LittleEndian.AppendUint64(conf[:0], last)
		if _, err := c.Write(conf); err != nil {
			return err
		}
	}
}

// floorReplicaMain runs `floor --replica` on ln until ctx ends.
func floorReplicaMain(ctx context.Context, ln net.Listener, fsync bool, stdout, stderr io.Writer) int {
	f, err := os.CreateTemp("", "smss-bench-floor-replica-*")
	if err != nil {
		ln.Close()
		fmt.Fprintln(stderr, "smss-bench floor:", err)
		return 1
	}
	defer os.Remove(f.Name())
	defer f.Close()
	fmt.Fprintln(stdout, "floor replica listening on", ln.Addr())
	if err := serveFloorReplica(ctx, ln, f, fsync, stderr); err != nil {
		fmt.Fprintln(stderr, "smss-bench floor replica:", err)
		return 1
	}
	return 0
}
