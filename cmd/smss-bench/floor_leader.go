package main

import (
	"errors"
	"io"
	"sync"
	"sync/atomic"
)

// floorLeader is the writer of `floor --leader`: leader/follower group
// commit (RocksDB's WriteThread, MySQL's binlog group commit). There is no
// writer goroutine: a connection goroutine that finds no writer at work
// becomes the leader, writes every queued publish as one group (twice, as
// the binlog and the topic file) and wakes only the followers it wrote for;
// a publish arriving while a leader writes queues and waits. When the
// leader is done and publishes have queued meanwhile, it hands leadership
// to the first of them instead of writing their group itself, so its own
// client's reply is not held behind other clients' writes. With one
// publishing connection no goroutine is ever woken: the leader writes its
// own publish and replies.
type floorLeader struct {
	w      io.Writer
	groups *atomic.Int64 // the server's count of group writes

	mu      sync.Mutex
	writing bool       // a leader holds the file (also across a hand-over)
	queue   []floorPub // publishes waiting for the next group
	spare   []floorPub // the last group's slice, reused for the next queue
	buf     []byte     // the group's bytes; used by the leader only
}

// errFloorLead tells a queued publisher that it is now the leader. It is
// never returned to a client.
var errFloorLead = errors.New("floor: you lead the next group")

// write returns once payload is written as part of a group; done is the
// caller's own channel (buffered, capacity 1).
func (l *floorLeader) write(payload []byte, done chan error) error {
	l.mu.Lock()
	l.queue = append(l.queue, floorPub{payload: payload, done: done})
	if l.writing {
		l.mu.Unlock()
		if err := <-done; err != errFloorLead {
			return err // a leader wrote this publish
		}
		l.mu.Lock() // handed over: writing stays true
	}
	l.writing = true
	group := l.queue
	l.queue = l.spare[:0]
	l.mu.Unlock()

	buf := l.buf[:0]
	for _, p := range group {
		buf = append(buf, p.payload...)
	}
	l.buf = buf
	l.groups.Add(1)
	_, err := l.w.Write(buf) // the binlog's copy
	if err == nil {
		_, err = l.w.Write(buf) // the topic file's
	}
	for _, p := range group {
		if p.done != done {
			p.done <- err
		}
	}

	l.mu.Lock()
	clear(group) // drop the payloads: their connections reuse them
	l.spare = group[:0]
	var next chan error
	if len(l.queue) > 0 {
		next = l.queue[0].done
	} else {
		l.writing = false
	}
	l.mu.Unlock()
	if next != nil {
		next <- errFloorLead
	}
	return err
}
