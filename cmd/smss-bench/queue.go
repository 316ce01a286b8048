package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/smssmq/smss/protocol"
)

// The queue workload (issue 33): competing consumers of one group. W
// workers, each on its own connection, consume a preloaded topic until
// every message is acknowledged and the server confirmed the ack. smss: a
// queue group (commands 41 and 44, frames 210 and 211, outcome units);
// Redis: a consumer group (XGROUP CREATE, XREADGROUP, XACK). --batch B is
// the per-worker batch: B = 1 acks one by one (smss maxInFlight 1, Redis
// XREADGROUP COUNT 1 then XACK of one id), B > 1 in batches (smss
// maxInFlight B and the acks of each delivered frame in one write, Redis
// XREADGROUP COUNT B then one XACK of the ids it returned).

// queueGroup is the group name both systems use.
const queueGroup = "bench"

// queueSys is a system that has competing-consumer groups.
type queueSys interface {
	// createGroup creates the group over everything stored, for workers
	// consumers taking up to batch messages each.
	createGroup(workers, batch int) error
	dialWorker(name string, batch int) (queueWorker, error)
}

// queueWorker is one consumer of the group.
type queueWorker interface {
	// start asks for the first deliveries (the clock is running).
	start() error
	// step reads the next delivery or confirmation and acks what was
	// delivered: it returns how many messages it received and how many of
	// its acks the server confirmed as recorded. drained reports that the
	// group has nothing left to hand out. Each ack round trip (acks
	// written → their confirmation) is recorded in h.
	step(h *hist) (delivered, confirmed int, drained bool, err error)
	close() error
}

// ackLat times ack round trips of a worker whose acks and confirmations
// are pipelined: each write of acks waits in line for the confirmations
// that complete it.
type ackLat struct {
	written, confirmed int64
	fifo               []ackWrite
}

type ackWrite struct {
	upTo int64 // written after this write
	at   time.Time
}

func (a *ackLat) wrote(n int) {
	a.written += int64(n)
	a.fifo = append(a.fifo, ackWrite{upTo: a.written, at: time.Now()})
}

func (a *ackLat) got(n int, h *hist) {
	a.confirmed += int64(n)
	now := time.Now()
	i := 0
	for ; i < len(a.fifo) && a.fifo[i].upTo <= a.confirmed; i++ {
		h.record(now.Sub(a.fifo[i].at))
	}
	a.fifo = append(a.fifo[:0], a.fifo[i:]...)
}

// --- smss ---

func (s *smssSys) createGroup(workers, batch int) error {
	c, err := dialSmss(s.addr)
	if err != nil {
		return err
	}
	defer c.close()
	c.c.SetDeadline(time.Now().Add(30 * time.Second))
	// The group's own limit must not bind before the workers' (Redis has
	// none): room for every worker's batch.
	cfg := protocol.QueueConfig{Group: queueGroup, From: "oldest", MaxInFlight: batch,
		MaxInFlightGroup: min(max(workers*batch, protocol.DefaultQueueMaxInFlight), protocol.MaxQueueMaxInFlight)}
	req, err := protocol.AppendQueueRequest(nil, protocol.CmdQueueCreate, s.topic, cfg)
	if err != nil {
		return err
	}
	if _, err := c.c.Write(req); err != nil {
		return fmt.Errorf("write queue create: %w", err)
	}
	if _, err := protocol.ReadReply(c.r, protocol.ReplyJSON, maxFrame); err != nil {
		return fmt.Errorf("create queue group %s on %s: %w", queueGroup, s.topic, err)
	}
	return nil
}

// smssWorker is a consumer stream. Frames are read into one reused buffer
// and walked in place, as the subscription consumer does.
type smssWorker struct {
	*smssConn
	consume []byte
	buf     []byte
	acks    []byte
	lat     ackLat
}

func (s *smssSys) dialWorker(name string, batch int) (queueWorker, error) {
	req, err := protocol.AppendQueueRequest(nil, protocol.CmdQueueConsume, s.topic,
		protocol.QueueConsume{Group: queueGroup, Consumer: name, MaxInFlight: batch})
	if err != nil {
		return nil, err
	}
	c, err := dialSmss(s.addr)
	if err != nil {
		return nil, err
	}
	return &smssWorker{smssConn: c, consume: req}, nil
}

func (w *smssWorker) start() error {
	if _, err := w.c.Write(w.consume); err != nil {
		return fmt.Errorf("write consume request: %w", err)
	}
	return nil
}

// step never reports drained: the stream stays open with nothing to
// deliver, and the runner stops once every message is confirmed.
func (w *smssWorker) step(h *hist) (int, int, bool, error) {
	for {
		var hd protocol.RespHeader
		if _, err := io.ReadFull(w.r, hd[:]); err != nil {
			return 0, 0, false, fmt.Errorf("read queue frame header: %w", err)
		}
		switch hd.Code() {
		case protocol.StatusQueueMessages:
			n := int(binary.LittleEndian.Uint16(hd[2:4]))
			if err := w.read(int(binary.LittleEndian.Uint32(hd[4:8]))); err != nil {
				return 0, 0, false, err
			}
			if err := w.ackAll(n); err != nil {
				return 0, 0, false, err
			}
			return n, 0, false, nil
		case protocol.StatusQueueConfirm:
			n := int(binary.LittleEndian.Uint32(hd[2:6]))
			if err := w.read(n * protocol.QueueConfirmSize); err != nil {
				return 0, 0, false, err
			}
			done := 0
			for b := w.buf; len(b) >= protocol.QueueConfirmSize; b = b[protocol.QueueConfirmSize:] {
				// Result 1 (no longer pending) would be a message another
				// worker got after an ack wait passed: not this ack's.
				if protocol.QueueOp(b[8]) == protocol.QueueOpAck && b[9] == protocol.QueueResultDone {
					done++
				}
			}
			w.lat.got(n, h)
			return 0, done, false, nil
		default:
			// Alive, end or error: the protocol's reader says which.
			f, err := protocol.ReadQueueFrame(io.MultiReader(bytes.NewReader(hd[:]), w.r), maxFrame)
			if err != nil {
				return 0, 0, false, err
			}
			if f.Code == protocol.StatusSubEnd {
				return 0, 0, false, errStreamEnded
			}
		}
	}
}

func (w *smssWorker) read(n int) error {
	if n > maxFrame {
		return fmt.Errorf("queue frame of %d bytes", n)
	}
	if cap(w.buf) < n {
		w.buf = make([]byte, n)
	}
	w.buf = w.buf[:n]
	if _, err := io.ReadFull(w.r, w.buf); err != nil {
		return fmt.Errorf("read queue frame: %w", err)
	}
	return nil
}

// ackAll acks the n messages of the frame in w.buf with one write.
func (w *smssWorker) ackAll(n int) error {
	w.acks = w.acks[:0]
	area := w.buf
	for i := 0; i < n; i++ {
		if len(area) < protocol.QueueMessageFixedSize+protocol.RecordPrefixSize {
			return fmt.Errorf("%w: unit %d of %d truncated", protocol.ErrQueueFrame, i, n)
		}
		id := int64(binary.LittleEndian.Uint64(area[8:]))
		size := protocol.QueueMessageFixedSize + protocol.RecordPrefixSize +
			int(binary.LittleEndian.Uint32(area[protocol.QueueMessageFixedSize:]))
		if size > len(area) {
			return fmt.Errorf("%w: record of unit %d truncated", protocol.ErrQueueFrame, i)
		}
		area = area[size:]
		w.acks = protocol.AppendQueueOutcome(w.acks, protocol.QueueOutcome{Op: protocol.QueueOpAck, EventID: id})
	}
	if len(area) != 0 {
		return fmt.Errorf("%w: %d bytes after %d units", protocol.ErrQueueFrame, len(area), n)
	}
	w.lat.wrote(n)
	if _, err := w.c.Write(w.acks); err != nil {
		return fmt.Errorf("write acks: %w", err)
	}
	return nil
}

// --- Redis ---

func (s *redisSys) createGroup(_, _ int) error {
	c, err := dialRedis(s.addr)
	if err != nil {
		return err
	}
	defer c.close()
	if err := c.do("XGROUP", "CREATE", s.key, queueGroup, "0"); err != nil {
		return fmt.Errorf("XGROUP CREATE %s %s 0: %w", s.key, queueGroup, err)
	}
	return nil
}

type redisWorker struct {
	*redisConn
	read  []byte // XREADGROUP GROUP g name COUNT B STREAMS key >
	key   []byte
	idLen []int // the ids of the last XREADGROUP, back to back in idBuf
	idBuf []byte
	args  [][]byte
	req   []byte
}

func (s *redisSys) dialWorker(name string, batch int) (queueWorker, error) {
	c, err := dialRedis(s.addr)
	if err != nil {
		return nil, err
	}
	read := appendCommand(nil, strArgs([]string{"XREADGROUP", "GROUP", queueGroup, name, "COUNT", strconv.Itoa(batch),
		"STREAMS", s.key, ">"})...)
	return &redisWorker{redisConn: c, read: read, key: []byte(s.key)}, nil
}

func (w *redisWorker) start() error { return nil }

// step is one XREADGROUP and, if it returned entries, one XACK of their
// ids: two round trips, as a Redis consumer takes them.
func (w *redisWorker) step(h *hist) (int, int, bool, error) {
	if _, err := w.c.Write(w.read); err != nil {
		return 0, 0, false, fmt.Errorf("write XREADGROUP: %w", err)
	}
	w.idBuf, w.idLen = w.idBuf[:0], w.idLen[:0]
	n, err := w.readStreams(func(id, _ []byte) {
		w.idBuf = append(w.idBuf, id...)
		w.idLen = append(w.idLen, len(id))
	})
	if err != nil {
		return 0, 0, false, err
	}
	if n == 0 {
		return 0, 0, true, nil
	}
	if len(w.idLen) != n {
		return 0, 0, false, fmt.Errorf("%w: %d entries, %d with a body", errProtocol, n, len(w.idLen))
	}
	w.args = append(w.args[:0], []byte("XACK"), w.key, []byte(queueGroup))
	off := 0
	for _, l := range w.idLen {
		w.args = append(w.args, w.idBuf[off:off+l])
		off += l
	}
	w.req = appendCommand(w.req[:0], w.args...)
	t0 := time.Now()
	if _, err := w.c.Write(w.req); err != nil {
		return 0, 0, false, fmt.Errorf("write XACK: %w", err)
	}
	t, rest, err := w.header()
	if err != nil {
		return 0, 0, false, fmt.Errorf("XACK: %w", err)
	}
	if t != ':' {
		return 0, 0, false, fmt.Errorf("%w: XACK answered %q%s", errProtocol, t, rest)
	}
	acked, err := strconv.Atoi(string(rest))
	if err != nil {
		return 0, 0, false, fmt.Errorf("%w: XACK count %q", errProtocol, rest)
	}
	h.record(time.Since(t0))
	return n, acked, false, nil
}

// --- the workload ---

// runQueue is the queue workload: preload o.count messages (not timed),
// create the group, then o.conns workers consume until the server has
// confirmed an ack for every message. The clock runs from the first
// consume to the last confirmation; only confirmed acks count.
func (r *runner) runQueue(inst *instance) (*Result, error) {
	o := r.o
	qs, ok := inst.sys.(queueSys)
	if !ok {
		return nil, fmt.Errorf("%s has no queue groups here", inst.sys.name())
	}
	fill, err := r.prefill(inst.sys, o.count, "prefill "+inst.sys.name(), inst.pid)
	if err != nil {
		return nil, err
	}
	want := fill.messages
	if err := qs.createGroup(o.conns, o.batch); err != nil {
		return nil, err
	}
	workers := make([]queueWorker, 0, o.conns)
	defer func() {
		for _, w := range workers {
			w.close()
		}
	}()
	for i := 0; i < o.conns; i++ {
		w, err := qs.dialWorker(fmt.Sprintf("w%d", i), o.batch)
		if err != nil {
			return nil, err
		}
		workers = append(workers, w)
	}
	m := r.begin(inst, wQueue)
	m.res.Params.Records = 100 // the prefill's requests
	prog := r.startProgress("queue "+inst.sys.name(), inst.pid)
	st, err := r.work(workers, want, prog)
	prog.finish()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", inst.sys.name(), err)
	}
	m.res.Messages, m.res.Requests = st.confirmed, st.batches
	m.res.Seconds = st.elapsed.Seconds()
	m.res.Latency = st.hist.summary("ack")
	m.res.Extra = map[string]float64{"prefill msgs/s": float64(fill.messages) / fill.elapsed.Seconds()}
	return m.end(want), nil
}

type workStats struct {
	confirmed, batches int64
	hist               *hist
	elapsed            time.Duration
}

// work runs the workers until want acks are confirmed. A worker whose
// group is drained stops; the rest stop (their connections closed) once
// the last confirmation arrived, or on the first error.
func (r *runner) work(workers []queueWorker, want int64, prog *progress) (*workStats, error) {
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	stopClose := context.AfterFunc(ctx, func() {
		for _, w := range workers {
			w.close()
		}
	})
	defer stopClose()
	var (
		confirmed atomic.Int64
		end       atomic.Int64 // ns after start of the last confirmation
		errOnce   sync.Once
		firstErr  error
		wg        sync.WaitGroup
		hists     = make([]*hist, len(workers))
		batches   = make([]int64, len(workers))
	)
	fail := func(err error) {
		if ctx.Err() == nil {
			errOnce.Do(func() { firstErr = err })
		}
		cancel()
	}
	start := time.Now()
	for i, w := range workers {
		hists[i] = newHist()
		wg.Add(1)
		go func(i int, w queueWorker) {
			defer wg.Done()
			if err := w.start(); err != nil {
				fail(err)
				return
			}
			for ctx.Err() == nil {
				n, c, drained, err := w.step(hists[i])
				if err != nil {
					fail(fmt.Errorf("worker %d after %d of %d confirmed acks: %w", i, confirmed.Load(), want, err))
					return
				}
				if drained {
					return
				}
				if n > 0 {
					batches[i]++
				}
				if c > 0 {
					prog.n.Add(int64(c))
					if confirmed.Add(int64(c)) >= want {
						end.Store(int64(time.Since(start)))
						cancel()
						return
					}
				}
			}
		}(i, w)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	timer := time.NewTimer(r.o.timeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		cancel()
		<-done
		return nil, fmt.Errorf("%d of %d acks confirmed within %s", confirmed.Load(), want, r.o.timeout)
	}
	if firstErr != nil {
		return nil, firstErr
	}
	if err := r.ctx.Err(); err != nil {
		return nil, err
	}
	st := &workStats{confirmed: confirmed.Load(), hist: newHist(), elapsed: time.Duration(end.Load())}
	if st.confirmed < want {
		return nil, fmt.Errorf("the group drained with %d of %d acks confirmed", st.confirmed, want)
	}
	for i := range workers {
		st.hist.merge(hists[i])
		st.batches += batches[i]
	}
	return st, nil
}
