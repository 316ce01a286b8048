package kit

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/protocol"
)

// Fnode is one of the three processes; its port never changes, its role
// does.
type Fnode struct {
	Name string
	Dir  string
	Port int
	P    *Proc
}

// Addr is the node's message address.
func (n *Fnode) Addr() string { return "127.0.0.1:" + strconv.Itoa(n.Port) }

// Data is the node's data directory.
func (n *Fnode) Data() string { return filepath.Join(n.Dir, "data") }

// nodeStatus is the JSON answer of status (34) and promote (35).
type nodeStatus struct {
	Role        string `json:"role"`
	Epoch       int64  `json:"epoch"`
	LastEventID int64  `json:"lastEventId"`
	Master      string `json:"master"`
}

// AdminCommand sends status (34), promote (35) or follow (36, topic =
// the master's host:port) and returns the JSON answer, if any.
func AdminCommand(t *testing.T, addr string, cmd protocol.Command, topic string) nodeStatus {
	t.Helper()
	c := Dial(t, addr)
	defer c.C.Close()
	req := Must(protocol.AppendRequest(nil, cmd, [16]byte{}, []byte(topic), nil, nil))
	kind := protocol.ReplyJSON
	if cmd == 36 {
		kind = protocol.ReplyPlain
	}
	body, err := c.RoundTrip(req, kind)
	if err != nil {
		t.Fatalf("command %d on %s: %v", cmd, addr, err)
	}
	var st nodeStatus
	if len(body) > 0 {
		if err := json.Unmarshal(body, &st); err != nil {
			t.Fatalf("command %d on %s: %v in %q", cmd, addr, err, body)
		}
	}
	return st
}

// FailoverLoad is eight publishers that retry every request with its
// message id until it is acknowledged.
type FailoverLoad struct {
	topics []string
	Addr   atomic.Pointer[string]
	gate   sync.RWMutex // held shared by every attempt; pause takes it
	stop   chan struct{}
	wg     sync.WaitGroup
	once   sync.Once

	AckedCount, Refused, Retried atomic.Int64
	FencedRefused                atomic.Int64 // refusals of a fenced cluster master

	// sticky, when set, is the address the odd publishers write to instead
	// of addr: clients that stay with the node they know (a zombie master)
	// while the others follow the new one.
	Sticky atomic.Pointer[string]

	Mu     sync.Mutex
	Acked  map[string]bool // body → acknowledged (false: sent, outcome unknown)
	gone   map[string]bool // acknowledged but lost in a failover (async only)
	Acks   []AckRecord     // every acknowledgement, in the order they arrived
	paused bool
}

// AckRecord is one acknowledged request: the node that answered 200 and
// when the request was sent and answered.
type AckRecord struct {
	Addr       string
	Sent, Done time.Time
}

// NewFailoverLoad returns a FailoverLoad on topics sending to addr until
// SetAddr names another node.
func NewFailoverLoad(addr string, topics []string) *FailoverLoad {
	l := &FailoverLoad{topics: topics, stop: make(chan struct{}), Acked: map[string]bool{}, gone: map[string]bool{}}
	l.Addr.Store(&addr)
	return l
}

// SetAddr points the publishers at the node now master.
func (l *FailoverLoad) SetAddr(a string) { l.Addr.Store(&a) }

// Pause holds the publishers before their next request.
func (l *FailoverLoad) Pause() {
	l.gate.Lock()
	l.paused = true
}

// Resume lets paused publishers go on.
func (l *FailoverLoad) Resume() {
	l.paused = false
	l.gate.Unlock()
}

// Finish stops the publishers; what they were still retrying stays
// "outcome unknown" (stored at most once).
func (l *FailoverLoad) Finish() {
	l.once.Do(func() {
		close(l.stop)
		if l.paused {
			l.Resume()
		}
		l.wg.Wait()
	})
}

// Start runs publishers goroutines until Finish.
func (l *FailoverLoad) Start(publishers int) {
	for g := 0; g < publishers; g++ {
		l.wg.Add(1)
		go l.publisher(g)
	}
}

// fconn is a publisher's connection, redialled after any failure.
type fconn struct {
	addr string
	c    net.Conn
	r    *bufio.Reader
}

func (f *fconn) close() {
	if f.c != nil {
		f.c.Close()
		f.c = nil
	}
}

func (l *FailoverLoad) publisher(g int) {
	defer l.wg.Done()
	var fc fconn
	defer fc.close()
	topic := l.topics[g%len(l.topics)]
	for seq := 0; ; seq++ {
		n := 1
		if seq%2 == 1 {
			n = 10
		}
		var recs []byte
		bodies := make([]string, n)
		for i := range bodies {
			bodies[i] = fmt.Sprintf("g%d-s%06d-i%02d", g, seq, i)
			var h [][2]string
			if i == 0 {
				h = [][2]string{{"smss-msg-id", fmt.Sprintf("fo-%d-%d", g, seq)}}
			}
			recs = append(recs, Record(h, bodies[i])...)
		}
		req := Must(protocol.AppendPub(nil, []byte(topic), nil, recs))
		l.Mu.Lock()
		for _, b := range bodies {
			l.Acked[b] = false
		}
		l.Mu.Unlock()
		for attempt := 0; ; attempt++ {
			select {
			case <-l.stop:
				return
			default:
			}
			if attempt > 0 {
				l.Retried.Add(1)
				select {
				case <-l.stop:
					return
				case <-time.After(20 * time.Millisecond): // retry backoff
				}
			}
			l.gate.RLock()
			addr := *l.Addr.Load()
			if sa := l.Sticky.Load(); sa != nil && g%2 == 1 {
				addr = *sa
			}
			sent := time.Now()
			err := l.try(&fc, addr, req)
			done := time.Now()
			l.gate.RUnlock()
			if err == nil {
				l.Mu.Lock()
				for _, b := range bodies {
					l.Acked[b] = true
				}
				l.Acks = append(l.Acks, AckRecord{Addr: addr, Sent: sent, Done: done})
				l.Mu.Unlock()
				l.AckedCount.Add(int64(n))
				break
			}
			var be *protocol.BizError
			if errors.As(err, &be) {
				if strings.HasPrefix(be.Error(), "write not confirmed") {
					l.Refused.Add(1)
				}
				if strings.HasPrefix(be.Error(), protocol.FencedPrefix) {
					l.FencedRefused.Add(1)
				}
				continue // a slave's refusal or an unconfirmed write: same id again
			}
			fc.close()
		}
	}
}

func (l *FailoverLoad) try(fc *fconn, addr string, req []byte) error {
	if fc.c == nil || fc.addr != addr {
		fc.close()
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return err
		}
		fc.c, fc.r, fc.addr = c, bufio.NewReader(c), addr
	}
	// Longer than syncTimeoutMs, so a refusal arrives before the deadline.
	fc.c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fc.c.Write(req); err != nil {
		return err
	}
	_, err := protocol.ReadReply(fc.r, protocol.ReplyPlain, 1<<20)
	return err
}

// Verify checks the new master's binlog against what the publishers were
// told: every message at most once, each publisher's messages in order,
// every acknowledged message present (a missing one is counted as lost
// and remembered, so later cycles do not count it again). It returns the
// number newly lost.
func (l *FailoverLoad) Verify(t *testing.T, dataDir string, cycle int) int {
	t.Helper()
	s := ReadStore(t, dataDir, l.topics)
	seen := map[string]int{}
	lastSeq := map[string]string{} // publisher → last "s<seq>-i<i>"
	ours := map[string]bool{}
	for _, name := range l.topics {
		ours[name] = true
	}
	for _, b := range s.Binlog {
		// Only the load's topics: a subscriber's stored position is a
		// publish to __cursors.
		if b.Cmd != binlog.CmdPub || !ours[string(b.Topic)] {
			continue
		}
		recs := b.Payload
		for len(recs) > 0 {
			r, n, err := protocol.ParseRecord(recs)
			if err != nil {
				t.Fatalf("cycle %d: stored record: %v", cycle, err)
			}
			recs = recs[n:]
			body := string(r.Body)
			seen[body]++
			if seen[body] > 1 {
				t.Fatalf("cycle %d: %q is stored %d times on the new master", cycle, body, seen[body])
			}
			pub, rest, _ := strings.Cut(body, "-")
			if rest <= lastSeq[pub] {
				t.Fatalf("cycle %d: publisher %s's %q is stored after %q", cycle, pub, rest, lastSeq[pub])
			}
			lastSeq[pub] = rest
		}
	}
	topicTotal := 0
	for name, blocks := range s.Topics {
		for _, blk := range blocks {
			if seen[BodyOf(t, blk.Record)] != 1 {
				t.Fatalf("cycle %d: topic %s holds %q, which the binlog does not hold once", cycle, name, BodyOf(t, blk.Record))
			}
		}
		topicTotal += len(blocks)
	}
	if topicTotal != len(seen) {
		inTopics := map[string]bool{}
		for _, blocks := range s.Topics {
			for _, blk := range blocks {
				inTopics[BodyOf(t, blk.Record)] = true
			}
		}
		var missing []string
		for b := range seen {
			if !inTopics[b] && len(missing) < 10 {
				missing = append(missing, b)
			}
		}
		t.Fatalf("cycle %d: %d messages in the binlog, %d in the topic files; in the binlog only: %q", cycle, len(seen), topicTotal, missing)
	}
	lost := 0
	l.Mu.Lock()
	defer l.Mu.Unlock()
	for body, ok := range l.Acked {
		if ok && seen[body] == 0 && !l.gone[body] {
			l.gone[body] = true
			lost++
		}
	}
	return lost
}
