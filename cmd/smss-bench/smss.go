package main

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/smssmq/smss/protocol"
)

// publisher sends one request of its configured number of messages and
// waits for the reply. stamp (ns on the benchmark's clock) is written into
// the first 8 bytes of every message body so consumers can measure
// publish→delivery latency.
type publisher interface {
	publish(stamp int64) error
	close() error
}

// consumer reads one batch of stored messages, calls fn with each message
// body and returns how many it read. Keep-alive frames are skipped.
type consumer interface {
	next(fn func(body []byte)) (int, error)
	close() error
}

// system is a server under test: smss or Redis.
type system interface {
	name() string
	durability() string
	// prepare creates the (empty) topic or stream the run uses.
	prepare() error
	dialPublisher(size, records int) (publisher, error)
	dialConsumer(batch int) (consumer, error)
}

// dialTimeout bounds connecting to a server under test.
const dialTimeout = 5 * time.Second

// maxFrame caps what a benchmark client accepts in one frame: 255 messages
// of the largest record the server accepts by default.
const maxFrame = 64 << 20

// stampSize is the prefix of each body that carries the publish time.
const stampSize = 8

// body returns a message body of size bytes (at least stampSize).
func body(size int) []byte {
	b := make([]byte, max(size, stampSize))
	for i := stampSize; i < len(b); i++ {
		b[i] = 'a' + byte(i%26)
	}
	return b
}

func readStamp(body []byte) (int64, bool) {
	if len(body) < stampSize {
		return 0, false
	}
	return int64(binary.LittleEndian.Uint64(body)), true
}

// smssSys talks the smss wire protocol over plain TCP connections: no client
// library, no pool, one request in flight per connection, like the Go
// client's PubClient.
type smssSys struct {
	addr  string
	topic string
	flush int
	who   atomic.Int64
	// ids: every publish request carries a new message id (record header
	// smss-msg-id on its first record), as the Go client sends them.
	ids bool
	// syncSlaves: the master answers 200 once this many slaves confirmed
	// (0: no slave attached, or asynchronous replication).
	syncSlaves int
	cluster    bool // a three-node -role auto cluster's master
}

func (s *smssSys) name() string       { return "smss" }
func (s *smssSys) durability() string { return fmt.Sprintf("flushLevel %d", s.flush) }

func (s *smssSys) copies() string {
	if s.cluster {
		return fmt.Sprintf("cluster of %d (-role auto, syncSlaves 1): a 200 means every in-sync member stored it (%d copies while all are in sync; each fsynced per its flushLevel)",
			clusterSize, clusterSize)
	}
	if s.syncSlaves > 0 {
		return fmt.Sprintf("syncSlaves %d: a 200 means the master and %d slave(s) stored it (%d copies; each fsynced per its flushLevel)",
			s.syncSlaves, s.syncSlaves, s.syncSlaves+1)
	}
	return ""
}

type smssConn struct {
	c   net.Conn
	r   *bufio.Reader
	req []byte
}

func dialSmss(addr string) (*smssConn, error) {
	c, err := net.DialTimeout("tcp", addr, dialTimeout)
	if err != nil {
		return nil, fmt.Errorf("dial smss %s: %w", addr, err)
	}
	return &smssConn{c: c, r: bufio.NewReaderSize(c, 64<<10)}, nil
}

func (c *smssConn) close() error { return c.c.Close() }

// roundTrip sends req and reads a plain reply.
func (c *smssConn) roundTrip(req []byte) error {
	if _, err := c.c.Write(req); err != nil {
		return fmt.Errorf("write request: %w", err)
	}
	_, err := protocol.ReadReply(c.r, protocol.ReplyPlain, 0)
	return err
}

// createTopic creates a permanent topic; an existing one is accepted.
func createTopic(addr, topic string) error {
	c, err := dialSmss(addr)
	if err != nil {
		return err
	}
	defer c.close()
	c.c.SetDeadline(time.Now().Add(30 * time.Second))
	req, err := protocol.AppendCreate(nil, []byte(topic), nil, 0)
	if err != nil {
		return err
	}
	err = c.roundTrip(req)
	// ReadReply returns a fresh BizError, so compare the text. A master
	// with replication.syncSlaves and no slave yet (--sync-slaves) stores
	// the topic and says it was not confirmed: the slave attached later
	// replicates it.
	var be *protocol.BizError
	if err != nil && !(errors.As(err, &be) && (be.Msg == protocol.ErrTopicExist.Msg || strings.HasPrefix(be.Msg, "write not confirmed"))) {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	return nil
}

// createTopicConfirmed creates topic and requires a 200: on a master with
// replication.syncSlaves, the slaves confirmed it.
func createTopicConfirmed(addr, topic string) error {
	c, err := dialSmss(addr)
	if err != nil {
		return err
	}
	defer c.close()
	c.c.SetDeadline(time.Now().Add(30 * time.Second))
	req, err := protocol.AppendCreate(nil, []byte(topic), nil, 0)
	if err != nil {
		return err
	}
	if err := c.roundTrip(req); err != nil {
		return fmt.Errorf("create topic %s on the semi-synchronous master: %w", topic, err)
	}
	return nil
}

func (s *smssSys) prepare() error { return createTopic(s.addr, s.topic) }

// smssPub is one connection publishing a fixed request: records copies of a
// record whose body is size bytes. stamps holds the offsets of the bodies.
type smssPub struct {
	*smssConn
	stamps []int
	// idAt is the offset of the message id's value in req (-1: no id);
	// idSeq numbers this connection's requests, idBase the connection.
	idAt   int
	idSeq  uint64
	idBase uint64
}

func (s *smssSys) dialPublisher(size, records int) (publisher, error) {
	return newSmssPub(s.addr, s.topic, size, records, s.ids)
}

// idLen is the message id the Go client sends: 32 hex characters.
const idLen = 32

var idConns atomic.Uint64

func newSmssPub(addr, topic string, size, records int, ids bool) (*smssPub, error) {
	one, err := protocol.AppendRecord(nil, protocol.Record{Body: body(size)})
	if err != nil {
		return nil, err
	}
	first := one
	if ids {
		placeholder := make([]byte, idLen)
		for i := range placeholder {
			placeholder[i] = '0'
		}
		first, err = protocol.AppendRecord(nil, protocol.Record{Body: body(size),
			Headers: []protocol.KV{{Key: protocol.MsgIDHeader, Value: string(placeholder)}}})
		if err != nil {
			return nil, err
		}
	}
	payload := make([]byte, 0, len(first)+len(one)*(records-1))
	payload = append(payload, first...)
	for i := 1; i < records; i++ {
		payload = append(payload, one...)
	}
	req, err := protocol.AppendPub(nil, []byte(topic), nil, payload)
	if err != nil {
		return nil, err
	}
	// Every body is the last size bytes of its record.
	head := len(req) - len(payload)
	p := &smssPub{idAt: -1, idBase: uint64(time.Now().UnixNano())<<8 ^ idConns.Add(1)}
	p.stamps = append(p.stamps, head+len(first)-len(body(size)))
	for i := 1; i < records; i++ {
		p.stamps = append(p.stamps, head+len(first)+i*len(one)-len(body(size)))
	}
	if ids {
		// prefix, count, key length, key, value length, then the value.
		p.idAt = head + protocol.RecordPrefixSize + 4 + len(protocol.MsgIDHeader) + 4
	}
	c, err := dialSmss(addr)
	if err != nil {
		return nil, err
	}
	c.req = req
	p.smssConn = c
	return p, nil
}

func (p *smssPub) publish(stamp int64) error {
	for _, off := range p.stamps {
		binary.LittleEndian.PutUint64(p.req[off:], uint64(stamp))
	}
	if p.idAt >= 0 {
		// A new id per request, unique across connections and runs.
		p.idSeq++
		var raw [16]byte
		binary.BigEndian.PutUint64(raw[:8], p.idBase)
		binary.BigEndian.PutUint64(raw[8:], p.idSeq)
		hex.Encode(p.req[p.idAt:p.idAt+idLen], raw[:])
	}
	return p.roundTrip(p.req)
}

// smssSub is a subscription stream; it acks each frame after handing its
// messages to the caller, as a consumer that acks processed work does.
type smssSub struct {
	*smssConn
	frames *protocol.SubFrameReader
	ack    [2]byte
}

func (s *smssSys) dialConsumer(batch int) (consumer, error) {
	who := fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), s.who.Add(1))
	return subscribeSmss(s.addr, s.topic, who, 0, batch)
}

func subscribeSmss(addr, topic, who string, from int64, batch int) (*smssSub, error) {
	if batch < 1 || batch > 255 {
		return nil, fmt.Errorf("batch %d out of 1..255", batch)
	}
	req, err := protocol.AppendSub(nil, []byte(topic), nil, from, uint8(batch), 30*time.Second, []byte(who))
	if err != nil {
		return nil, err
	}
	c, err := dialSmss(addr)
	if err != nil {
		return nil, err
	}
	if _, err := c.c.Write(req); err != nil {
		c.close()
		return nil, fmt.Errorf("write sub request: %w", err)
	}
	// Frames are read into one reused buffer and walked without building
	// message structs, as the Redis side parses replies in place.
	return &smssSub{smssConn: c, frames: protocol.NewSubFrameReader(c.r, maxFrame)}, nil
}

// errStreamEnded reports a 255 (topic deleted) on a subscription.
var errStreamEnded = errors.New("subscription ended by the server")

func (s *smssSub) next(fn func(body []byte)) (int, error) {
	for {
		f, err := s.frames.Next()
		if err != nil {
			return 0, err
		}
		switch f.Code {
		case protocol.StatusAlive:
			continue
		case protocol.StatusSubEnd:
			return 0, errStreamEnded
		}
		if err := protocol.WalkSubMessages(f.Body, f.Count, func(_ int64, body []byte) { fn(body) }); err != nil {
			return 0, err
		}
		if _, err := s.c.Write(s.ack[:]); err != nil { // ack code 0: continue
			return 0, fmt.Errorf("write ack: %w", err)
		}
		return f.Count, nil
	}
}
