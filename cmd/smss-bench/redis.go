package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
)

// The Redis side speaks RESP directly over net.Conn, like the smss side
// speaks its own protocol: no client library, no pool, no per-reply maps,
// so neither server is handicapped by the cost of its client on this
// shared 2-core machine.

// redisError is a "-ERR ..." reply.
type redisError string

func (e redisError) Error() string { return "redis: " + string(e) }

// errProtocol reports a reply the parser did not expect.
var errProtocol = errors.New("redis protocol error")

// maxBulk caps a bulk string or array length read from the server.
const maxBulk = 64 << 20

type redisConn struct {
	c   net.Conn
	r   *bufio.Reader
	buf []byte
	id  []byte // the entry id readStreams is at (c.buf is reused for the fields)
}

func dialRedis(addr string) (*redisConn, error) {
	c, err := net.DialTimeout("tcp", addr, dialTimeout)
	if err != nil {
		return nil, fmt.Errorf("dial redis %s: %w", addr, err)
	}
	return &redisConn{c: c, r: bufio.NewReaderSize(c, 64<<10)}, nil
}

func (c *redisConn) close() error { return c.c.Close() }

// appendCommand appends a RESP array of bulk strings.
func appendCommand(dst []byte, args ...[]byte) []byte {
	dst = append(dst, '*')
	dst = strconv.AppendInt(dst, int64(len(args)), 10)
	dst = append(dst, '\r', '\n')
	for _, a := range args {
		dst = append(dst, '$')
		dst = strconv.AppendInt(dst, int64(len(a)), 10)
		dst = append(dst, '\r', '\n')
		dst = append(dst, a...)
		dst = append(dst, '\r', '\n')
	}
	return dst
}

func strArgs(args []string) [][]byte {
	out := make([][]byte, len(args))
	for i, a := range args {
		out[i] = []byte(a)
	}
	return out
}

// line reads one CRLF-terminated line without the CRLF. The slice is valid
// until the next read.
func (c *redisConn) line() ([]byte, error) {
	l, err := c.r.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, fmt.Errorf("%w: line longer than %d bytes", errProtocol, c.r.Size())
		}
		return nil, fmt.Errorf("read redis reply: %w", err)
	}
	if len(l) < 3 || l[len(l)-2] != '\r' {
		return nil, fmt.Errorf("%w: bad line %q", errProtocol, l)
	}
	return l[:len(l)-2], nil
}

// header reads a reply's type byte and its line. A '-' reply is returned as
// a redisError.
func (c *redisConn) header() (byte, []byte, error) {
	l, err := c.line()
	if err != nil {
		return 0, nil, err
	}
	if l[0] == '-' {
		return 0, nil, redisError(l[1:])
	}
	return l[0], l[1:], nil
}

func parseLen(b []byte) (int, error) {
	n, err := strconv.Atoi(string(b))
	if err != nil || n < -1 || n > maxBulk {
		return 0, fmt.Errorf("%w: bad length %q", errProtocol, b)
	}
	return n, nil
}

// skip reads and discards one whole reply of any type.
func (c *redisConn) skip() error {
	t, rest, err := c.header()
	if err != nil {
		return err
	}
	switch t {
	case '+', ':':
		return nil
	case '$':
		n, err := parseLen(rest)
		if err != nil || n < 0 {
			return err
		}
		_, err = c.r.Discard(n + 2)
		return err
	case '*':
		n, err := parseLen(rest)
		if err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			if err := c.skip(); err != nil {
				return err
			}
		}
		return nil
	default:
		return fmt.Errorf("%w: reply type %q", errProtocol, t)
	}
}

// bulk reads a bulk string into c.buf (valid until the next bulk); nil
// bulk strings are an error here.
func (c *redisConn) bulk() ([]byte, error) {
	t, rest, err := c.header()
	if err != nil {
		return nil, err
	}
	if t != '$' {
		return nil, fmt.Errorf("%w: want bulk string, got %q", errProtocol, t)
	}
	n, err := parseLen(rest)
	if err != nil {
		return nil, err
	}
	if n < 0 {
		return nil, fmt.Errorf("%w: nil bulk string", errProtocol)
	}
	if cap(c.buf) < n+2 {
		c.buf = make([]byte, n+2)
	}
	b := c.buf[:n+2]
	if _, err := io.ReadFull(c.r, b); err != nil {
		return nil, fmt.Errorf("read bulk string: %w", err)
	}
	return b[:n], nil
}

// array reads an array header; -1 means a nil array.
func (c *redisConn) array() (int, error) {
	t, rest, err := c.header()
	if err != nil {
		return 0, err
	}
	if t != '*' {
		return 0, fmt.Errorf("%w: want array, got %q", errProtocol, t)
	}
	return parseLen(rest)
}

// do sends one command and discards its reply.
func (c *redisConn) do(args ...string) error {
	if _, err := c.c.Write(appendCommand(nil, strArgs(args)...)); err != nil {
		return fmt.Errorf("write redis command: %w", err)
	}
	return c.skip()
}

func (c *redisConn) ping() error {
	if _, err := c.c.Write(appendCommand(nil, []byte("PING"))); err != nil {
		return err
	}
	t, rest, err := c.header()
	if err != nil {
		return err
	}
	if t != '+' || string(rest) != "PONG" {
		return fmt.Errorf("%w: PING answered %q%s", errProtocol, t, rest)
	}
	return nil
}

// redisSys runs the workloads on one Redis stream: XADD per message with no
// MAXLEN (a request of several records is that many pipelined XADDs), XREAD
// COUNT to consume.
type redisSys struct {
	addr  string
	key   string
	flush int
	live  bool // consumers use XREAD BLOCK (e2e) rather than plain XREAD
}

func (s *redisSys) name() string       { return "redis" }
func (s *redisSys) durability() string { return "appendfsync " + appendfsync(s.flush) }

func (s *redisSys) prepare() error {
	c, err := dialRedis(s.addr)
	if err != nil {
		return err
	}
	defer c.close()
	if err := c.do("DEL", s.key); err != nil {
		return fmt.Errorf("DEL %s: %w", s.key, err)
	}
	return nil
}

// bodyField is the stream entry's one field name.
var bodyField = []byte("d")

type redisPub struct {
	*redisConn
	req    []byte
	n      int
	stamps []int
}

func (s *redisSys) dialPublisher(size, records int) (publisher, error) {
	b := body(size)
	one := appendCommand(nil, []byte("XADD"), []byte(s.key), []byte("*"), bodyField, b)
	p := &redisPub{n: records}
	off := len(one) - 2 - len(b) // the body is the last argument, before its CRLF
	for i := 0; i < records; i++ {
		p.stamps = append(p.stamps, len(p.req)+off)
		p.req = append(p.req, one...)
	}
	c, err := dialRedis(s.addr)
	if err != nil {
		return nil, err
	}
	p.redisConn = c
	return p, nil
}

func (p *redisPub) publish(stamp int64) error {
	for _, off := range p.stamps {
		binary.LittleEndian.PutUint64(p.req[off:], uint64(stamp))
	}
	if _, err := p.c.Write(p.req); err != nil {
		return fmt.Errorf("write XADD: %w", err)
	}
	var first error
	for i := 0; i < p.n; i++ { // read every reply to keep the stream in sync
		if err := p.skip(); err != nil && first == nil {
			first = err
			if !isRedisError(err) {
				return err
			}
		}
	}
	return first
}

func isRedisError(err error) bool {
	var re redisError
	return errors.As(err, &re)
}

type redisSub struct {
	*redisConn
	key   []byte
	count []byte
	block bool
	last  []byte
	req   []byte
}

func (s *redisSys) dialConsumer(batch int) (consumer, error) {
	c, err := dialRedis(s.addr)
	if err != nil {
		return nil, err
	}
	return &redisSub{redisConn: c, key: []byte(s.key), count: []byte(strconv.Itoa(batch)),
		block: s.live, last: []byte("0-0")}, nil
}

// next sends XREAD COUNT B [BLOCK 1000] STREAMS key lastId and walks the
// reply. With BLOCK a timeout (nil reply) is retried like an smss alive
// frame; without it an exhausted stream returns 0.
func (s *redisSub) next(fn func(body []byte)) (int, error) {
	for {
		if s.block {
			s.req = appendCommand(s.req[:0], []byte("XREAD"), []byte("COUNT"), s.count, []byte("BLOCK"), []byte("1000"),
				[]byte("STREAMS"), s.key, s.last)
		} else {
			s.req = appendCommand(s.req[:0], []byte("XREAD"), []byte("COUNT"), s.count, []byte("STREAMS"), s.key, s.last)
		}
		if _, err := s.c.Write(s.req); err != nil {
			return 0, fmt.Errorf("write XREAD: %w", err)
		}
		n, err := s.readStreams(func(id, body []byte) {
			s.last = append(s.last[:0], id...)
			fn(body)
		})
		if err != nil || n > 0 || !s.block {
			return n, err
		}
	}
}

// readStreams walks [[key, [[id, [field, value, ...]], ...]], ...], the
// reply of XREAD and XREADGROUP, calling fn with each entry's id and body
// (both valid only during the call).
func (s *redisConn) readStreams(fn func(id, body []byte)) (int, error) {
	streams, err := s.array()
	if err != nil || streams <= 0 {
		return 0, err
	}
	total := 0
	for i := 0; i < streams; i++ {
		if n, err := s.array(); err != nil || n != 2 {
			return total, shapeErr(err, "stream")
		}
		if _, err := s.bulk(); err != nil {
			return total, err
		}
		entries, err := s.array()
		if err != nil {
			return total, err
		}
		for j := 0; j < entries; j++ {
			if n, err := s.array(); err != nil || n != 2 {
				return total, shapeErr(err, "entry")
			}
			id, err := s.bulk()
			if err != nil {
				return total, err
			}
			s.id = append(s.id[:0], id...)
			fields, err := s.array()
			if err != nil {
				return total, err
			}
			for k := 0; k+1 < fields; k += 2 {
				name, err := s.bulk()
				if err != nil {
					return total, err
				}
				isBody := bytes.Equal(name, bodyField)
				val, err := s.bulk()
				if err != nil {
					return total, err
				}
				if isBody {
					fn(s.id, val)
				}
			}
			if fields%2 == 1 {
				if err := s.skip(); err != nil {
					return total, err
				}
			}
			total++
		}
	}
	return total, nil
}

func shapeErr(err error, what string) error {
	if err != nil {
		return err
	}
	return fmt.Errorf("%w: unexpected %s shape in XREAD/XREADGROUP reply", errProtocol, what)
}
