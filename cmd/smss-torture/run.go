package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/smssmq/smss/protocol"
)

// Check deadlines: how long a check may keep failing before it counts
// (servers write on their own while the workload is paused), and how long
// a slave may take to catch up.
const (
	checkTimeout   = 15 * time.Second
	catchUpTimeout = 90 * time.Second
)

type run struct {
	o      options
	out    io.Writer
	rng    *rand.Rand
	master *server
	slave  *server
	led    *ledger
	load   *load

	prevBin     []byte    // the master's binlog at the last passing check
	prevState   *binState // and what it says
	masterStart time.Time // when the master last started listening
	firstExpiry int64     // ms, expiry of the first topic with a lifetime
	masterKills int
	slaveKills  int
	checks      int
	start       time.Time
}

func newRun(o options, dir string, out io.Writer) (*run, error) {
	bin := o.smss
	if bin == "" {
		var err error
		if bin, err = buildSmss(dir); err != nil {
			return nil, err
		}
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	r := &run{o: o, out: out, rng: rand.New(rand.NewPCG(o.seed, 0)), led: newLedger(), start: time.Now()}
	r.master = &server{name: "master", bin: bin, dir: filepath.Join(dir, "master"), port: port}
	r.slave = &server{name: "slave", bin: bin, dir: filepath.Join(dir, "slave"), args: slaveArgs(port)}
	for _, s := range []*server{r.master, r.slave} {
		if err := os.MkdirAll(s.dir, 0o755); err != nil {
			return nil, err
		}
	}
	return r, nil
}

func (r *run) flushLevel() int { return r.rng.IntN(3) }

func (r *run) startMaster() error {
	if err := r.master.start(r.flushLevel()); err != nil {
		return err
	}
	r.masterStart = time.Now()
	return nil
}

func (r *run) run() (err error) {
	defer func() {
		if err != nil {
			r.master.kill()
			r.slave.kill()
		}
	}()
	// The slave starts on an empty master, so its first-start topic sync
	// copies nothing and every topic reaches it through the binlog.
	if err := r.startMaster(); err != nil {
		return err
	}
	if err := r.slave.start(r.flushLevel()); err != nil {
		return err
	}
	if err := r.createPermanent(); err != nil {
		return err
	}
	r.load = newLoad(r.master, r.slave, r.led, r.o.seed, r.o.pace)
	r.load.start()
	defer func() {
		if err != nil {
			r.load.halt()
		}
	}()
	cycle := 0
	for ; r.o.cycles == 0 || cycle < r.o.cycles; cycle++ {
		if r.o.duration > 0 && time.Since(r.start) > r.o.duration {
			break
		}
		if err := r.cycle(cycle); err != nil {
			return fmt.Errorf("cycle %d: %w", cycle, err)
		}
	}
	if err := r.finish(); err != nil {
		return fmt.Errorf("final check after %d cycles: %w", cycle, err)
	}
	r.summary(cycle)
	return nil
}

func (r *run) createPermanent() error {
	w, err := dialWire(r.master.address())
	if err != nil {
		return err
	}
	defer w.close()
	for _, name := range append([]string{delayTopic}, pubTopics...) {
		if _, err := w.roundTrip(mustEnc(protocol.AppendCreate(nil, []byte(name), nil, 0)), protocol.ReplyPlain); err != nil {
			return fmt.Errorf("create %s: %w", name, err)
		}
	}
	// One topic expires early, so that even a short run sees an expiry
	// (the server's minimum lifetime is 10 s); finish waits for its reap.
	r.firstExpiry = time.Now().UnixMilli() + 10500
	r.led.topics[firstLife] = &topicRec{life: true, expires: r.firstExpiry}
	_, err = w.roundTrip(mustEnc(protocol.AppendCreate(nil, []byte(firstLife), nil, r.firstExpiry)), protocol.ReplyPlain)
	if r.led.topics[firstLife].create = classify(err); err != nil {
		return fmt.Errorf("create %s: %w", firstLife, err)
	}
	body := "t/" + firstLife + "/0"
	r.led.pubs[body] = &pubRec{topic: firstLife, worker: -1}
	_, err = w.roundTrip(mustEnc(protocol.AppendPub(nil, []byte(firstLife), nil, recordOf(body, 1))), protocol.ReplyPlain)
	if r.led.pubs[body].state = classify(err); err != nil {
		return fmt.Errorf("pub to %s: %w", firstLife, err)
	}
	return nil
}

const firstLife = "life-0"

// reapGrace is how long after its expiry (or after the master's start, if
// it was down then) an expired topic must have been reaped: the master
// reaps within about a second.
const reapGrace = 3 * time.Second

// cycle lets the load run, kills one server at a random moment, restarts
// it and checks everything with the writers paused.
func (r *run) cycle(n int) error {
	r.load.cycleAcks.Store(0)
	deadline := time.Now().Add(30 * time.Second)
	for r.load.cycleAcks.Load() < 20 {
		if err := r.alarms(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("load stalled: %d messages acknowledged in 30 s", r.load.cycleAcks.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The random moment: load keeps running until the kill.
	time.Sleep(time.Duration(r.rng.Int64N(int64(r.o.maxWait))))
	victim := r.slave
	if r.rng.IntN(2) == 0 {
		victim = r.master
	}
	t0 := time.Now()
	victim.kill()
	if victim == r.master {
		r.masterKills++
	} else {
		r.slaveKills++
	}
	if err := checkStoppedMeta(victim.dataDir(), false, victim == r.slave); err != nil {
		return fmt.Errorf("%s killed: %w", victim.name, err)
	}
	restart := func() error { return r.slave.start(r.flushLevel()) }
	if victim == r.master {
		restart = r.startMaster
	}
	t1 := time.Now()
	if err := restart(); err != nil {
		return fmt.Errorf("restart %s: %w", victim.name, err)
	}
	t2 := time.Now()
	r.load.gate.pause()
	defer r.load.gate.resume()
	if err := r.check(false); err != nil {
		return fmt.Errorf("after killing the %s: %w", victim.name, err)
	}
	if r.o.verbose {
		fmt.Fprintf(r.out, "cycle %d: killed the %s (kill+meta %v, restart %v, checks %v); %d messages acknowledged so far, binlog %d bytes, %s\n",
			n, victim.name, t1.Sub(t0).Round(time.Millisecond), t2.Sub(t1).Round(time.Millisecond), time.Since(t2).Round(time.Millisecond),
			r.led.acks.Load(), len(r.prevBin), time.Since(r.start).Round(time.Millisecond))
	}
	return nil
}

func (r *run) alarms() error {
	for _, s := range []*server{r.master, r.slave} {
		if a := s.alarm(); a != "" {
			return fmt.Errorf("%s logged: %s", s.name, a)
		}
		if !s.running() {
			return fmt.Errorf("%s exited on its own: %v", s.name, s.exitErr())
		}
	}
	return nil
}

// check verifies the master, the subscribers and the slave.
func (r *run) check(final bool) error {
	t0 := time.Now()
	var bin []byte
	var state *binState
	err := retry(checkTimeout, func() error {
		if err := r.alarms(); err != nil {
			return err
		}
		b, st, err := stableBinlog(r.master.dataDir())
		if err != nil {
			return err
		}
		if !bytes.HasPrefix(b, r.prevBin) {
			return fmt.Errorf("the master's binlog verified at the previous check (%d bytes) is not a prefix of its binlog now (%d bytes; first difference at byte %d)",
				len(r.prevBin), len(b), commonPrefix(b, r.prevBin))
		}
		now, reapBy := time.Now().UnixMilli(), int64(0)
		if grace := reapGrace.Milliseconds(); now-r.masterStart.UnixMilli() > grace {
			reapBy = now - grace
		}
		if err := checkLedger(r.led, st, final, reapBy); err != nil {
			return err
		}
		if err := checkFiles(r.master.address(), r.master.dataDir(), st, false); err != nil {
			return fmt.Errorf("master: %w", err)
		}
		for _, s := range r.load.subs {
			if err := checkSubscriber(s, st, final); err != nil {
				return err
			}
		}
		bin, state = b, st
		return nil
	})
	if err != nil {
		return err
	}
	r.prevBin, r.prevState = bin, state
	t1 := time.Now()
	if err := r.checkSlave(); err != nil {
		return err
	}
	r.checks++
	if r.o.verbose {
		fmt.Fprintf(r.out, "  check: master %v, slave %v\n", t1.Sub(t0).Round(time.Millisecond), time.Since(t1).Round(time.Millisecond))
	}
	return nil
}

// checkSlave waits until the slave's binlog equals the master's (it must
// be a prefix all along), then compares the slave's topics.
func (r *run) checkSlave() error {
	deadline := time.Now().Add(catchUpTimeout)
	for {
		if err := r.alarms(); err != nil {
			return err
		}
		// Sizes first (cheap), bytes once they agree. The slave is read
		// before the master: the master only grows, so the slave must be
		// a prefix of it.
		ss, err := binlogSize(r.slave.dataDir())
		if err != nil {
			return err
		}
		ms, err := binlogSize(r.master.dataDir())
		if err != nil {
			return err
		}
		if ss > ms {
			return fmt.Errorf("the slave's binlog (%d bytes) is longer than the master's (%d bytes)", ss, ms)
		}
		if ss == ms {
			s, err := readBinlog(r.slave.dataDir())
			if err != nil {
				return err
			}
			m, err := readBinlog(r.master.dataDir())
			if err != nil {
				return err
			}
			if !bytes.HasPrefix(m, s) {
				return fmt.Errorf("the slave's binlog (%d bytes) is not a prefix of the master's (%d bytes); common prefix %d",
					len(s), len(m), commonPrefix(m, s))
			}
			if len(s) == len(m) {
				break
			}
		}
		if time.Now().After(deadline) {
			r.slave.dump()
			r.master.dump()
			return fmt.Errorf("the slave did not catch up within %v: %d of %d bytes (goroutine dumps in both logs)", catchUpTimeout, ss, ms)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return retry(checkTimeout, func() error {
		b, err := readBinlog(r.slave.dataDir())
		if err != nil {
			return err
		}
		st := r.prevState
		if !bytes.Equal(b, r.prevBin) {
			// The master wrote more since its check (a delay fired).
			if b, st, err = stableBinlog(r.slave.dataDir()); err != nil {
				return err
			}
			m, err := readBinlog(r.master.dataDir())
			if err != nil {
				return err
			}
			if !bytes.HasPrefix(m, b) {
				return errors.New("the slave's binlog is not a prefix of the master's")
			}
		}
		if err := checkFiles(r.slave.address(), r.slave.dataDir(), st, true); err != nil {
			return fmt.Errorf("slave: %w", err)
		}
		return nil
	})
}

// finish stops the writers, lets every delay fire and the subscribers
// catch up, checks, stops both servers cleanly and checks their meta.
func (r *run) finish() error {
	r.load.stopWriting()
	r.led.mu.Lock()
	due := int64(0)
	for _, d := range r.led.delays {
		due = max(due, d.due)
	}
	r.led.mu.Unlock()
	// Delays fire within about a second of their due time, and the first
	// expiring topic must be reaped: wait for that before the final check
	// starts counting its own deadline.
	until := max(due+1500, r.firstExpiry+reapGrace.Milliseconds()+100)
	if wait := time.Until(time.UnixMilli(until)); wait > 0 {
		time.Sleep(wait)
	}
	t0 := time.Now()
	err := retry(30*time.Second, func() error { return r.check(true) })
	r.load.halt()
	if err != nil {
		return err
	}
	t1 := time.Now()
	if err := r.slave.term(); err != nil {
		return err
	}
	if err := r.master.term(); err != nil {
		return err
	}
	if r.o.verbose {
		fmt.Fprintf(r.out, "final: checks %v, clean stops %v\n", t1.Sub(t0).Round(time.Millisecond), time.Since(t1).Round(time.Millisecond))
	}
	for _, s := range []*server{r.master, r.slave} {
		if err := checkStoppedMeta(s.dataDir(), true, s == r.slave); err != nil {
			return fmt.Errorf("%s after a clean stop: %w", s.name, err)
		}
		if a := s.alarm(); a != "" {
			return fmt.Errorf("%s logged: %s", s.name, a)
		}
	}
	return nil
}

func (r *run) summary(cycles int) {
	st := r.prevState
	led := r.led
	led.mu.Lock()
	var refusedN, unknownN, delaysAcked, created, deleted, expired int
	for _, p := range led.pubs {
		switch p.state {
		case refused:
			refusedN++
		case unknown:
			unknownN++
		}
	}
	for _, d := range led.delays {
		if d.state == acked {
			delaysAcked++
		}
	}
	for name, t := range led.topics {
		if t.create == acked {
			created++
		}
		if st.deletes[name] > 0 {
			if t.life {
				expired++
			} else {
				deleted++
			}
		}
	}
	led.mu.Unlock()
	applied := 0
	for _, d := range st.delays {
		applied += d.applies
	}
	received := 0
	for _, s := range r.load.subs {
		got, _ := s.snapshot()
		received += len(got)
	}
	mErr, mRep, _ := r.master.counts()
	sErr, sRep, _ := r.slave.counts()
	fmt.Fprintf(r.out, "smss-torture PASS seed=%d cycles=%d masterKills=%d slaveKills=%d checks=%d acked=%d (single requests %d, batches %d) refused=%d unknown=%d delaysAcked=%d delaysApplied=%d topicsCreated=%d topicsDeleted=%d topicsExpired=%d subscriberMessages=%d binlogBlocks=%d binlogBytes=%d lastEventId=%d repairedStarts=%d errorLogLines=%d elapsed=%s\n",
		r.o.seed, cycles, r.masterKills, r.slaveKills, r.checks, led.acks.Load(), led.singles.Load(), led.batches.Load(),
		refusedN, unknownN, delaysAcked, applied, created, deleted, expired, received, st.blocks, len(r.prevBin), st.lastID,
		mRep+sRep, mErr+sErr, time.Since(r.start).Round(time.Millisecond))
}
