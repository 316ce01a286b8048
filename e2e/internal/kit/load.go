package kit

import (
	"bytes"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

// Acked is one message the server acknowledged.
type Acked struct {
	topic string
	body  string
}

// Load runs publishers against addr until stop is closed or their
// connection breaks, and reports every acknowledged message.
type Load struct {
	mu    sync.Mutex
	Acked []Acked
	Count atomic.Int64
	Wg    sync.WaitGroup
}

// Run starts workers publishers on topics at addr; they stop when stop is
// closed or their connection breaks (l.Wg tells when).
func (l *Load) Run(t *testing.T, addr string, topics []string, workers int, cycle int, stop <-chan struct{}) {
	for g := 0; g < workers; g++ {
		l.Wg.Add(1)
		go func(g int) {
			defer l.Wg.Done()
			c := Dial(t, addr)
			topic := topics[g%len(topics)]
			for seq := 0; ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				// Every third request is a batch of 1–20 records.
				n := 1
				if seq%3 == 2 {
					n = 1 + (seq/3)%20
				}
				recs := make([][]byte, n)
				bodies := make([]string, n)
				for i := range recs {
					bodies[i] = fmt.Sprintf("c%d-g%d-s%d-i%d-%s", cycle, g, seq, i, bytes.Repeat([]byte("x"), seq%50))
					recs[i] = Record([][2]string{{"traceId", strconv.Itoa(seq)}}, bodies[i])
				}
				if err := c.Pub(topic, recs...); err != nil {
					return // the server died: this request is not acknowledged
				}
				l.mu.Lock()
				for _, b := range bodies {
					l.Acked = append(l.Acked, Acked{topic: topic, body: b})
				}
				l.mu.Unlock()
				l.Count.Add(int64(n))
			}
		}(g)
	}
}

// Verify checks the store against what was acknowledged: every
// acknowledged message exactly once in its topic file and in the binlog,
// eventIds strictly increasing everywhere.
func Verify(t *testing.T, dataDir string, topics []string, acks []Acked) {
	t.Helper()
	s := ReadStore(t, dataDir, topics)
	binBodies := map[string]int{}
	last := int64(0)
	for _, b := range s.Binlog {
		if b.EventID <= last {
			t.Fatalf("binlog eventId %d after %d", b.EventID, last)
		}
		n, err := b.MessageCount()
		if err != nil {
			t.Fatal(err)
		}
		last = b.EventID + int64(n) - 1
		if b.Cmd != 1 {
			continue
		}
		recs := b.Payload
		for len(recs) > 0 {
			size := 8 + int(uint32(recs[0])|uint32(recs[1])<<8|uint32(recs[2])<<16|uint32(recs[3])<<24)
			binBodies[string(b.Topic)+"/"+BodyOf(t, recs[:size])]++
			recs = recs[size:]
		}
	}
	topicBodies := map[string]int{}
	for _, name := range topics {
		prev := int64(0)
		for _, blk := range s.Topics[name] {
			if blk.EventID <= prev {
				t.Fatalf("topic %s eventId %d after %d", name, blk.EventID, prev)
			}
			prev = blk.EventID
			topicBodies[name+"/"+BodyOf(t, blk.Record)]++
		}
	}
	for key, n := range binBodies {
		if n != 1 {
			t.Fatalf("binlog holds %q %d times", key, n)
		}
		if topicBodies[key] != 1 {
			t.Fatalf("binlog message %q is %d times in its topic file", key, topicBodies[key])
		}
	}
	for key, n := range topicBodies {
		if n != 1 || binBodies[key] != 1 {
			t.Fatalf("topic message %q: %d times in topic, %d in binlog", key, n, binBodies[key])
		}
	}
	for _, a := range acks {
		if binBodies[a.topic+"/"+a.body] != 1 {
			t.Fatalf("acknowledged message %s/%s lost", a.topic, a.body)
		}
	}
}

// BodyOf is the body of a stored message record; the test fails if the
// record does not parse.
func BodyOf(t *testing.T, rec []byte) string {
	t.Helper()
	r, _, err := parseRecord(rec)
	if err != nil {
		t.Fatalf("stored record: %v", err)
	}
	return string(r)
}
