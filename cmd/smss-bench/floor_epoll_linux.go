//go:build linux

package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/smssmq/smss/protocol"
)

// floorEpoll is `floor --epoll`: Redis's shape in Go. One goroutine locked
// to its thread runs an epoll loop over every connection's socket; each
// turn it reads every ready socket once, parses every complete request,
// writes the turn's publishes as one group (twice, as the binlog and the
// topic file), delivers them to live subscribers and then writes the
// replies. No goroutine is woken per message. The listener stays Go's:
// accepting is rare, and the accepted socket is handed to the loop.
type floorEpoll struct {
	f    *floorServer
	w    io.Writer
	epfd int
	evfd int // eventfd: wakes the loop for new sockets and for stop

	mu       sync.Mutex
	pending  []int // accepted sockets the loop has not taken yet
	stopping bool
	done     chan struct{} // closed when the loop has returned
}

// epConn is one connection of the loop; only the loop touches it.
type epConn struct {
	fd   int
	in   []byte // received bytes not yet parsed into whole requests
	rd   sliceReader
	rr   *protocol.RequestReader
	out  []byte // replies of this turn, in request order
	sub  *floorSub
	dead bool // close at the end of the turn
	turn bool // in this turn's list of connections to reply to
}

// epPub is one publish of the turn: its records are group[off:end].
type epPub struct {
	c        *epConn
	sub      *floorSub
	off, end int
}

// sliceReader reads from b[off:]; the loop rewinds off when a request is
// not complete yet, so the RequestReader (which keeps no state between
// requests but its reused buffer) starts it again on the next turn.
type sliceReader struct {
	b   []byte
	off int
}

func (r *sliceReader) Read(p []byte) (int, error) {
	if r.off >= len(r.b) {
		return 0, io.EOF
	}
	n := copy(p, r.b[r.off:])
	r.off += n
	return n, nil
}

// epWriteTimeout bounds how long the loop waits on one socket that does not
// take its bytes (a stalled client); the socket is then closed.
const epWriteTimeout = 5 * time.Second

// startEpoll starts the epoll loop on file w; serve hands it every accepted
// connection and stops it when accepting ends.
func (f *floorServer) startEpoll(w io.Writer) error {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return fmt.Errorf("epoll_create1: %w", err)
	}
	evfd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return fmt.Errorf("eventfd: %w", err)
	}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, evfd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(evfd)}); err != nil {
		unix.Close(epfd)
		unix.Close(evfd)
		return fmt.Errorf("epoll_ctl eventfd: %w", err)
	}
	f.ep = &floorEpoll{f: f, w: w, epfd: epfd, evfd: evfd, done: make(chan struct{})}
	go f.ep.loop()
	return nil
}

// add hands an accepted connection's socket to the loop: a duplicate of
// its descriptor, then Go's copy is closed (which takes it out of Go's own
// poller; the socket lives on in the duplicate).
func (e *floorEpoll) add(c net.Conn) {
	defer c.Close()
	sc, ok := c.(syscall.Conn)
	if !ok {
		return
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return
	}
	fd := -1
	if cerr := raw.Control(func(s uintptr) { fd, err = unix.Dup(int(s)) }); cerr != nil || err != nil {
		return
	}
	unix.CloseOnExec(fd)
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return
	}
	e.mu.Lock()
	if e.stopping {
		e.mu.Unlock()
		unix.Close(fd)
		return
	}
	e.pending = append(e.pending, fd)
	e.mu.Unlock()
	e.wake()
}

func (e *floorEpoll) wake() {
	one := [8]byte{1} // the eventfd counter is a native-endian uint64; amd64 and arm64 are little-endian
	unix.Write(e.evfd, one[:])
}

// stop ends the loop, which closes every connection, and waits for it.
func (e *floorEpoll) stop() {
	e.mu.Lock()
	e.stopping = true
	e.mu.Unlock()
	e.wake()
	<-e.done
}

func (e *floorEpoll) loop() {
	// One thread for the whole server, as Redis's main thread.
	runtime.LockOSThread()
	defer close(e.done)
	conns := map[int32]*epConn{}
	defer func() {
		for _, c := range conns {
			e.closeConn(conns, c)
		}
		unix.Close(e.epfd)
		unix.Close(e.evfd)
	}()
	events := make([]unix.EpollEvent, 256)
	rbuf := make([]byte, 64<<10)
	var group []byte
	var pubs []epPub
	var turn []*epConn
	var req protocol.Request
	for {
		n, err := unix.EpollWait(e.epfd, events, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return
		}
		group, pubs, turn = group[:0], pubs[:0], turn[:0]
		for _, ev := range events[:n] {
			if ev.Fd == int32(e.evfd) {
				if !e.accept(conns) {
					return
				}
				continue
			}
			c := conns[ev.Fd]
			if c == nil {
				continue
			}
			if !c.turn {
				c.turn = true
				turn = append(turn, c)
			}
			m, err := unix.Read(c.fd, rbuf)
			switch {
			case m > 0:
			case errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR):
				continue
			default: // end of stream or a socket error
				c.dead = true
				continue
			}
			if c.sub != nil {
				continue // a subscriber's acks: read and dropped
			}
			c.in = append(c.in, rbuf[:m]...)
			group, pubs = e.parse(c, &req, group, pubs)
		}

		// One write per turn for all its publishes.
		var werr error
		if len(group) > 0 {
			e.f.groups.Add(1)
			if _, werr = e.w.Write(group); werr == nil { // the binlog's copy
				_, werr = e.w.Write(group) // the topic file's
			}
		}
		for _, p := range pubs {
			if werr != nil {
				// Not written: the connection is closed unanswered, so its
				// client sees the publish fail.
				p.c.dead = true
				continue
			}
			e.f.deliverTo(p.sub, group[p.off:p.end])
		}
		for _, c := range turn {
			c.turn = false
			if len(c.out) > 0 && !c.dead {
				if writeFD(c.fd, c.out) != nil {
					c.dead = true
				}
			}
			c.out = c.out[:0]
			if c.dead {
				e.closeConn(conns, c)
			}
		}
	}
}

// accept registers the sockets serve has handed over; false when the loop
// must stop.
func (e *floorEpoll) accept(conns map[int32]*epConn) bool {
	var cnt [8]byte
	unix.Read(e.evfd, cnt[:])
	e.mu.Lock()
	fds, stopping := e.pending, e.stopping
	e.pending = nil
	e.mu.Unlock()
	for _, fd := range fds {
		if stopping {
			unix.Close(fd)
			continue
		}
		if err := unix.EpollCtl(e.epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}); err != nil {
			unix.Close(fd)
			continue
		}
		c := &epConn{fd: fd}
		c.rr = protocol.NewRequestReader(&c.rd, protocol.DefaultLimits())
		conns[int32(fd)] = c
	}
	return !stopping
}

// parse reads every complete request in c.in: publishes join the turn's
// group, every reply is queued on c.out in request order (a publish's OK is
// sent only after the group is written).
func (e *floorEpoll) parse(c *epConn, req *protocol.Request, group []byte, pubs []epPub) ([]byte, []epPub) {
	c.rd.b, c.rd.off = c.in, 0
	for !c.dead && c.sub == nil {
		start := c.rd.off
		err := c.rr.Read(req)
		var re *protocol.RequestError
		switch {
		case err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF):
			c.rd.off = start // not complete yet: again once more bytes came
			c.in = c.in[:copy(c.in, c.in[start:])]
			return group, pubs
		case errors.As(err, &re):
			c.out = protocol.AppendReplyError(c.out, re.Error())
			c.dead = re.Close
			continue
		case err != nil:
			c.dead = true
			continue
		}
		switch req.Header.Cmd {
		case protocol.CmdSub:
			s := &floorSub{c: fdConn(c.fd)}
			e.f.register(string(req.Topic), s)
			c.sub = s
		case protocol.CmdPub:
			s := e.f.subscriberOf(string(req.Topic), req.Payload)
			off := len(group)
			group = append(group, req.Payload...)
			pubs = append(pubs, epPub{c: c, sub: s, off: off, end: len(group)})
			c.out = protocol.AppendReplyOK(c.out)
		case protocol.CmdCreate, protocol.CmdAlive:
			c.out = protocol.AppendReplyOK(c.out)
		default:
			c.out = protocol.AppendReplyError(c.out, "floor server: command not supported")
		}
	}
	c.in = c.in[:0]
	return group, pubs
}

func (e *floorEpoll) closeConn(conns map[int32]*epConn, c *epConn) {
	if c.sub != nil {
		e.f.mu.Lock()
		for topic, s := range e.f.subs {
			if s == c.sub {
				delete(e.f.subs, topic)
			}
		}
		e.f.mu.Unlock()
	}
	unix.EpollCtl(e.epfd, unix.EPOLL_CTL_DEL, c.fd, nil)
	unix.Close(c.fd)
	delete(conns, int32(c.fd))
}

// fdConn is a subscriber's socket as deliverTo writes it. Close only shuts
// the socket down: the loop sees the end of stream and closes it, so the
// descriptor is never reused while a turn still refers to it.
type fdConn int

func (fd fdConn) Write(b []byte) (int, error) {
	if err := writeFD(int(fd), b); err != nil {
		return 0, err
	}
	return len(b), nil
}

func (fd fdConn) Close() error { return unix.Shutdown(int(fd), unix.SHUT_RDWR) }

// writeFD writes all of b to the non-blocking socket fd, waiting for room
// at most epWriteTimeout at a time.
func writeFD(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if n > 0 {
			b = b[n:]
			continue
		}
		switch {
		case errors.Is(err, unix.EINTR):
		case errors.Is(err, unix.EAGAIN):
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
			m, perr := unix.Poll(pfd, int(epWriteTimeout/time.Millisecond))
			if perr != nil && !errors.Is(perr, unix.EINTR) {
				return fmt.Errorf("poll socket: %w", perr)
			}
			if m == 0 && perr == nil {
				return errors.New("socket write timed out")
			}
		case err != nil:
			return fmt.Errorf("write socket: %w", err)
		default:
			return io.ErrShortWrite
		}
	}
	return nil
}
