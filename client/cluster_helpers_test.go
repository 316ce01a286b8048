package client

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smssmq/smss/protocol"
)

var msgIDRe = regexp.MustCompile(`^[0-9a-f]{32}$`)

func isMessageID(s string) bool { return msgIDRe.MatchString(s) }

// dropProxy forwards connections to a real server, request by request, and
// throws away the first drop replies: the request reaches the server (and
// is stored), the connection is closed before the client sees the answer.
// That is a reply lost to a network failure.
type dropProxy struct {
	l        net.Listener
	target   string
	drop     atomic.Int32 // replies still to drop
	requests atomic.Int32 // requests forwarded
	wg       sync.WaitGroup
}

func startDropProxy(t *testing.T, target string, drop int) *dropProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &dropProxy{l: l, target: target}
	p.drop.Store(int32(drop))
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.serve(c)
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		p.wg.Wait()
	})
	return p
}

func (p *dropProxy) addr() string { return p.l.Addr().String() }

// serve relays one client connection: each request is read whole, sent to
// the server, and its plain reply relayed or dropped.
func (p *dropProxy) serve(c net.Conn) {
	defer c.Close()
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer s.Close()
	cr, sr := bufio.NewReader(c), bufio.NewReader(s)
	for {
		c.SetDeadline(time.Now().Add(30 * time.Second))
		s.SetDeadline(time.Now().Add(30 * time.Second))
		raw, err := readRawRequest(cr)
		if err != nil {
			return
		}
		if _, err := s.Write(raw); err != nil {
			return
		}
		p.requests.Add(1)
		reply, err := readRawReply(sr)
		if err != nil {
			return
		}
		if p.drop.Add(-1) >= 0 {
			return // the server answered; the client never hears it
		}
		if _, err := c.Write(reply); err != nil {
			return
		}
	}
}

// readRawRequest reads one request's bytes (header, topic, trace, body of a
// pub, delay, create or alive).
func readRawRequest(r *bufio.Reader) ([]byte, error) {
	var hb [protocol.HeaderSize]byte
	if _, err := io.ReadFull(r, hb[:]); err != nil {
		return nil, err
	}
	h := protocol.ParseHeader(&hb)
	n := int(h.TopicLen) + int(h.TraceLen)
	switch h.Cmd {
	case protocol.CmdPub:
		n += int(uint32(h.Area[0]) | uint32(h.Area[1])<<8 | uint32(h.Area[2])<<16 | uint32(h.Area[3])<<24)
	case protocol.CmdDelay:
		n += 8 + int(uint32(h.Area[0])|uint32(h.Area[1])<<8|uint32(h.Area[2])<<16|uint32(h.Area[3])<<24)
	case protocol.CmdCreate:
		n += 8
	case protocol.CmdAlive, protocol.CmdDelete:
	default:
		return nil, fmt.Errorf("proxy: command %v not relayed", h.Cmd)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, err
	}
	return append(hb[:], body...), nil
}

// readRawReply reads one plain reply (200, 201 or a 400 with its text).
func readRawReply(r *bufio.Reader) ([]byte, error) {
	var h protocol.RespHeader
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	out := append([]byte(nil), h[:]...)
	if h.Code() == protocol.StatusError {
		text := make([]byte, int(h[2])|int(h[3])<<8)
		if _, err := io.ReadFull(r, text); err != nil {
			return nil, err
		}
		out = append(out, text...)
	}
	return out, nil
}

// topicMessages returns every message of topic on the server at addr: it
// subscribes from the start as a fresh subscriber and stops at the first
// alive (the server has nothing more). The server must run with a short
// alive interval (fastAlive).
func topicMessages(t *testing.T, addr, topic string) []Delivery {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	who := fmt.Sprintf("check-%d", time.Now().UnixNano())
	req, err := protocol.AppendSub(nil, []byte(topic), []byte("check"), 0, 255, 10*time.Second, []byte(who))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Write(req); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(nc)
	var out []Delivery
	for {
		nc.SetDeadline(time.Now().Add(20 * time.Second))
		f, err := protocol.ReadSubFrame(r, 64<<20)
		if err != nil {
			t.Fatalf("read %s on %s: %v", topic, addr, err)
		}
		switch f.Code {
		case protocol.StatusAlive:
			return out
		case protocol.StatusOK:
			msgs, err := protocol.ParseSubMessages(f.Body, f.Count)
			if err != nil {
				t.Fatal(err)
			}
			for i := range msgs {
				out = append(out, deliveryFrom(&msgs[i]))
			}
			if _, err := nc.Write([]byte{0, 0}); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("read %s on %s: frame %d", topic, addr, f.Code)
		}
	}
}

// msgIDs returns the smss-msg-id of each delivery ("" when absent).
func msgIDs(ds []Delivery) []string {
	out := make([]string, len(ds))
	for i := range ds {
		out[i], _ = ds[i].Header(MessageIDHeader)
	}
	return out
}
