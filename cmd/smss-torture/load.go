package main

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/smssmq/smss/protocol"
)

// Topics of the workload. Permanent topics are never deleted; "tmp-N" are
// created, written and deleted; "life-N" expire 10–12 s after creation.
var (
	pubTopics  = []string{"p0", "p1", "p2", "p3"}
	delayTopic = "d0"
)

// pubRec is what the workload knows about one published message, keyed by
// its body (unique over a run).
type pubRec struct {
	topic  string
	worker int // publisher index; -1 for the topic churner
	seq    int // request number of that worker
	state  outcome
}

type delayRec struct {
	state outcome
	due   int64 // ms, at the latest (sent time + delay)
}

type topicRec struct {
	life    bool
	create  outcome
	delSent bool // a delete was sent (tmp topics); del is its outcome
	del     outcome
	expires int64 // life topics: expireAt
}

// ledger records every write and its outcome.
type ledger struct {
	mu     sync.Mutex
	pubs   map[string]*pubRec
	delays map[string]*delayRec
	topics map[string]*topicRec
	// order lists each publisher's bodies in the order it sent them.
	order map[int][]string

	acks, batches, singles atomic.Int64 // acknowledged messages and requests
}

func newLedger() *ledger {
	return &ledger{pubs: map[string]*pubRec{}, delays: map[string]*delayRec{}, topics: map[string]*topicRec{}, order: map[int][]string{}}
}

// gate lets the checks pause every writer between two requests.
type gate struct{ mu sync.RWMutex }

func (g *gate) enter()  { g.mu.RLock() }
func (g *gate) leave()  { g.mu.RUnlock() }
func (g *gate) pause()  { g.mu.Lock() }
func (g *gate) resume() { g.mu.Unlock() }

// load runs the workload against the master.
type load struct {
	master *server
	slave  *server
	led    *ledger
	gate   gate
	seed   uint64
	pace   time.Duration // publishers pause up to this between requests
	// Writers (publishers, delayer, churner) stop first, so the final
	// check can wait for the subscribers to receive everything.
	stopWriters chan struct{}
	writers     sync.WaitGroup
	stop        chan struct{}
	wg          sync.WaitGroup
	stopW       sync.Once
	stopS       sync.Once
	subs        []*subscriber

	lifeN, tmpN atomic.Int64
	// cycleAcks counts acknowledged messages since the last reset, so a
	// kill can wait for load to reach the server.
	cycleAcks atomic.Int64
}

func newLoad(master, slave *server, led *ledger, seed uint64, pace time.Duration) *load {
	l := &load{master: master, slave: slave, led: led, seed: seed, pace: pace, stopWriters: make(chan struct{}), stop: make(chan struct{})}
	l.subs = []*subscriber{
		newSubscriber("p0@master", "p0", "torture-p0", master.address),
		newSubscriber("d0@master", delayTopic, "torture-d0", master.address),
		newSubscriber("p1@slave", "p1", "torture-p1", slave.address),
	}
	return l
}

func (l *load) start() {
	for i := range pubTopics {
		goWorker(&l.writers, func() { l.publisher(i) })
	}
	goWorker(&l.writers, l.delayer)
	goWorker(&l.writers, l.churner)
	for i, s := range l.subs {
		goWorker(&l.wg, func() { s.run(l.stop, rand.New(rand.NewPCG(l.seed, uint64(100+i)))) })
	}
}

func goWorker(wg *sync.WaitGroup, f func()) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		f()
	}()
}

// stopWriting stops the writers and waits for them.
func (l *load) stopWriting() {
	l.stopW.Do(func() { close(l.stopWriters) })
	l.writers.Wait()
}

// halt stops every worker and waits for them.
func (l *load) halt() {
	l.stopWriting()
	l.stopS.Do(func() { close(l.stop) })
	l.wg.Wait()
}

func (l *load) stopped() bool {
	select {
	case <-l.stopWriters:
		return true
	default:
		return false
	}
}

// backoff waits d unless the writers stop first; false means stop.
func (l *load) backoff(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-l.stopWriters:
		return false
	case <-t.C:
		return true
	}
}

// conn keeps one connection to the master, redialling after failures.
type conn struct {
	l *load
	w *wire
}

// get returns a connection, or nil when the load stops.
func (c *conn) get() *wire {
	delay := 20 * time.Millisecond
	for c.w == nil {
		w, err := dialWire(c.l.master.address())
		if err == nil {
			c.w = w
			break
		}
		if !c.l.backoff(delay) {
			return nil
		}
		delay = min(2*delay, 500*time.Millisecond)
	}
	return c.w
}

// do sends one write request; an unknown outcome drops the connection.
func (c *conn) do(req []byte) outcome {
	w := c.get()
	if w == nil {
		return unknown
	}
	_, err := w.roundTrip(req, protocol.ReplyPlain)
	o := classify(err)
	if o == unknown {
		w.close()
		c.w = nil
	}
	return o
}

func (c *conn) close() {
	if c.w != nil {
		c.w.close()
	}
}

func mustEnc(b []byte, err error) []byte {
	if err != nil {
		panic(err) // the workload builds only valid requests
	}
	return b
}

func recordOf(body string, headers int) []byte {
	r := protocol.Record{Body: []byte(body)}
	for h := range headers {
		r.Headers = append(r.Headers, protocol.KV{Key: fmt.Sprintf("h%d", h), Value: "v"})
	}
	return mustEnc(protocol.AppendRecord(nil, r))
}

// publisher i publishes singles and batches of 1–20 records on one
// permanent topic.
func (l *load) publisher(i int) {
	rng := rand.New(rand.NewPCG(l.seed, uint64(i)))
	c := &conn{l: l}
	defer c.close()
	topic := pubTopics[i]
	for seq := 0; !l.stopped(); seq++ {
		n := 1
		if rng.IntN(3) == 0 {
			n = 1 + rng.IntN(20)
		}
		bodies := make([]string, n)
		var recs []byte
		for j := range bodies {
			bodies[j] = fmt.Sprintf("m/%d/%d/%d/%s", i, seq, j, strings.Repeat("x", rng.IntN(64)))
			recs = append(recs, recordOf(bodies[j], rng.IntN(3))...)
		}
		req := mustEnc(protocol.AppendPub(nil, []byte(topic), nil, recs))
		l.gate.enter()
		l.led.mu.Lock()
		for _, b := range bodies {
			l.led.pubs[b] = &pubRec{topic: topic, worker: i, seq: seq}
			l.led.order[i] = append(l.led.order[i], b)
		}
		l.led.mu.Unlock()
		o := c.do(req)
		l.settle(bodies, o)
		l.gate.leave()
		// A short random pause bounds the data a long run accumulates
		// (every check reads all of it) while keeping requests of all
		// publishers in flight at most moments.
		if l.pace > 0 && !l.backoff(time.Duration(rng.Int64N(int64(l.pace)))) {
			return
		}
	}
}

func (l *load) settle(bodies []string, o outcome) {
	l.led.mu.Lock()
	for _, b := range bodies {
		l.led.pubs[b].state = o
	}
	l.led.mu.Unlock()
	if o == acked {
		l.led.acks.Add(int64(len(bodies)))
		l.cycleAcks.Add(int64(len(bodies)))
		if len(bodies) > 1 {
			l.led.batches.Add(1)
		} else {
			l.led.singles.Add(1)
		}
	}
}

// delayer sends delayed messages (1–3 records, due in 1–3 s) to the delay
// topic.
func (l *load) delayer() {
	rng := rand.New(rand.NewPCG(l.seed, 10))
	c := &conn{l: l}
	defer c.close()
	for seq := 0; !l.stopped(); seq++ {
		n := 1 + rng.IntN(3)
		delay := int64(1000 + rng.IntN(2001))
		bodies := make([]string, n)
		var recs []byte
		for j := range bodies {
			bodies[j] = fmt.Sprintf("d/%d/%d", seq, j)
			recs = append(recs, recordOf(bodies[j], 0)...)
		}
		req := mustEnc(protocol.AppendDelay(nil, []byte(delayTopic), nil, delay, recs))
		l.gate.enter()
		due := time.Now().UnixMilli() + delay
		l.led.mu.Lock()
		for _, b := range bodies {
			l.led.delays[b] = &delayRec{}
		}
		l.led.mu.Unlock()
		o := c.do(req)
		now := time.Now().UnixMilli()
		l.led.mu.Lock()
		for _, b := range bodies {
			l.led.delays[b].state = o
			l.led.delays[b].due = max(due, now+delay)
		}
		l.led.mu.Unlock()
		l.gate.leave()
		// Delays are a trickle next to the publishers: about 20 a second.
		if !l.backoff(time.Duration(20+rng.IntN(60)) * time.Millisecond) {
			return
		}
	}
}

// churner creates topics, publishes to them and deletes them; every third
// topic instead gets a lifetime of 10–12 s (the server's minimum is 10 s)
// and is left to expire.
func (l *load) churner() {
	rng := rand.New(rand.NewPCG(l.seed, 11))
	c := &conn{l: l}
	defer c.close()
	for k := 0; !l.stopped(); k++ {
		life := k%3 == 2
		var name string
		var expireAt int64
		if life {
			name = fmt.Sprintf("life-%d", l.lifeN.Add(1))
			expireAt = time.Now().UnixMilli() + 10500 + int64(rng.IntN(1500))
		} else {
			name = fmt.Sprintf("tmp-%d", l.tmpN.Add(1))
		}
		l.gate.enter()
		l.led.mu.Lock()
		l.led.topics[name] = &topicRec{life: life, expires: expireAt}
		l.led.mu.Unlock()
		o := c.do(mustEnc(protocol.AppendCreate(nil, []byte(name), nil, expireAt)))
		l.led.mu.Lock()
		l.led.topics[name].create = o
		l.led.mu.Unlock()
		l.gate.leave()
		for m := range 1 + rng.IntN(3) {
			body := fmt.Sprintf("t/%s/%d", name, m)
			req := mustEnc(protocol.AppendPub(nil, []byte(name), nil, recordOf(body, 1)))
			l.gate.enter()
			l.led.mu.Lock()
			l.led.pubs[body] = &pubRec{topic: name, worker: -1, seq: m}
			l.led.mu.Unlock()
			l.settle([]string{body}, c.do(req))
			l.gate.leave()
		}
		if !life {
			l.gate.enter()
			l.led.mu.Lock()
			l.led.topics[name].delSent = true
			l.led.mu.Unlock()
			o := c.do(mustEnc(protocol.AppendDelete(nil, []byte(name), nil)))
			l.led.mu.Lock()
			l.led.topics[name].del = o
			l.led.mu.Unlock()
			l.gate.leave()
		}
		if !l.backoff(time.Duration(50+rng.IntN(150)) * time.Millisecond) {
			return
		}
	}
}
