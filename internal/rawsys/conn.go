package rawsys

import (
	"net"
	"syscall"
)

// Conn reads and writes a connection: on linux with raw calls on its
// descriptor, waiting for readiness through Go's poller; otherwise (TLS,
// a pipe in a test, another system) through the net.Conn itself. Its
// deadlines are the connection's (SetReadDeadline, SetWriteDeadline).
type Conn struct {
	nc net.Conn
	rc syscall.RawConn // nil: through nc
}

// NewConn wraps nc.
func NewConn(nc net.Conn) Conn {
	c := Conn{nc: nc}
	if !Enabled {
		return c
	}
	if sc, ok := nc.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			c.rc = rc
		}
	}
	return c
}

// Raw reports whether the calls skip the scheduler.
func (c Conn) Raw() bool { return c.rc != nil }

// Read reads once, as net.Conn.Read: it waits until something can be
// read (or the read deadline), returns what one read(2) gave, and io.EOF
// at the end of the stream.
func (c Conn) Read(p []byte) (int, error) {
	if c.rc == nil {
		return c.nc.Read(p)
	}
	return c.readRaw(p)
}

// Write writes all of p, as net.Conn.Write, waiting for the socket to take
// it up to the write deadline.
func (c Conn) Write(p []byte) (int, error) {
	if c.rc == nil {
		return c.nc.Write(p)
	}
	return c.writeRaw(p)
}

// TryWrite writes what of p the socket takes at once, without waiting: n
// below len(p) with a nil error means the socket's buffer is full, and the
// rest is the caller's to write (with Write) after the n bytes. Through
// the net.Conn (not Raw) nothing can be written without perhaps waiting,
// so it writes nothing.
func (c Conn) TryWrite(p []byte) (int, error) {
	if c.rc == nil {
		return 0, nil
	}
	return c.tryWriteRaw(p)
}

// opError wraps err as net.Conn would: an OpError of op with the
// connection's addresses; an errno as an os.SyscallError inside it.
func (c Conn) opError(op string, err error) error {
	if oe, ok := err.(*net.OpError); ok {
		// From the poller (a deadline, a closed connection): named as
		// the raw call, renamed to what net.Conn says.
		e := *oe
		e.Op = op
		return &e
	}
	return &net.OpError{Op: op, Net: c.nc.LocalAddr().Network(), Source: c.nc.LocalAddr(), Addr: c.nc.RemoteAddr(), Err: err}
}

// WriteBuffers writes all of bufs, as net.Buffers.WriteTo on the
// connection: one writev(2) per batch of buffers, waiting for the socket
// up to the write deadline, and consuming what went out from bufs (so a
// caller that retries after a timeout sends only the rest).
func (c Conn) WriteBuffers(bufs *net.Buffers) (int64, error) {
	if c.rc == nil {
		return bufs.WriteTo(c.nc)
	}
	return c.writeBuffersRaw(bufs)
}

// consume drops the first n bytes of v, as net.Buffers does.
func consume(v *net.Buffers, n int64) {
	for len(*v) > 0 {
		first := int64(len((*v)[0]))
		if first > n {
			(*v)[0] = (*v)[0][n:]
			return
		}
		n -= first
		(*v)[0] = nil
		*v = (*v)[1:]
	}
}
