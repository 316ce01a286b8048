package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// runner runs workloads for one invocation.
type runner struct {
	o      *options
	env    *env
	ctx    context.Context
	stderr io.Writer
	base   time.Time // the clock of body timestamps

	smssBin string // built lazily
	natsBin string // built lazily
}

// now is the benchmark clock (monotonic ns since base) written into bodies.
func (r *runner) now() int64 { return int64(time.Since(r.base)) }

func (r *runner) smssBinary() (string, error) {
	if r.smssBin == "" {
		if r.o.smssBin != "" {
			r.smssBin = r.o.smssBin
		} else {
			bin, err := r.env.buildSmss(r.ctx)
			if err != nil {
				return "", err
			}
			r.smssBin = bin
		}
	}
	return r.smssBin, nil
}

func (r *runner) natsBinary() (string, error) {
	if r.natsBin == "" {
		if r.o.natsBin != "" {
			r.natsBin = r.o.natsBin
		} else {
			bin, err := r.env.buildNats(r.ctx)
			if err != nil {
				return "", err
			}
			r.natsBin = bin
		}
	}
	return r.natsBin, nil
}

// instance is a system under test and the processes behind it.
type instance struct {
	target string
	sys    system
	srv    *server // nil with --addr
	pid    int     // 0 when unknown
	slave  *server
	others []*server // the other nodes of a JetStream cluster
}

// copier is a system whose acknowledgement stands for more than one copy.
type copier interface {
	copies() string
}

func (r *runner) setup(target string) (*instance, error) {
	o := r.o
	inst := &instance{target: target, pid: o.pid}
	addr := o.addr
	if addr == "" {
		var err error
		if target == targetJetStream {
			err = r.setupNats(inst)
		} else if target == targetSmss {
			bin, berr := r.smssBinary()
			if berr != nil {
				return nil, berr
			}
			if o.cluster {
				var srvs []*server
				if srvs, err = r.env.startSmssCluster(r.ctx, bin, o.flush); err == nil {
					inst.srv, inst.others = srvs[0], srvs[1:]
				}
			} else {
				extra := ""
				if o.syncSlaves > 0 {
					extra = fmt.Sprintf("replication:\n  syncSlaves: %d\n", o.syncSlaves)
				}
				if o.noCursors {
					extra += "cursor:\n  enabled: false\n"
				}
				inst.srv, err = r.env.startSmss(r.ctx, bin, o.flush, "", extra)
			}
		} else {
			inst.srv, err = r.env.startRedis(r.ctx, o.redisBin, o.flush)
		}
		if err != nil {
			return nil, err
		}
		addr, inst.pid = inst.srv.addr, inst.srv.pid()
	}
	topic := o.topic
	if o.freshTopic {
		topic = fmt.Sprintf("%s-%d", o.topic, time.Now().UnixNano())
	}
	if target == targetJetStream {
		js := &jsSys{urls: []string{"nats://" + addr}, stream: topic, subject: topic, replicas: max(o.jsReplicas, 1),
			syncAlways: o.flush == 2, ack: o.jsAck, live: o.workload == wE2E}
		inst.sys = js
		if err := js.prepare(); err != nil {
			r.teardown(inst)
			return nil, err
		}
		if len(inst.others) > 0 {
			leader, err := streamLeader(append([]*server{inst.srv}, inst.others...), topic)
			if err != nil {
				r.teardown(inst)
				return nil, err
			}
			js.urls[0] = "nats://" + leader
			// Server CPU and RSS are the leader's, as they are the smss
			// master's.
			for _, s := range append([]*server{inst.srv}, inst.others...) {
				if s.addr == leader {
					inst.pid = s.pid()
				}
			}
		}
		return inst, nil
	}
	if target == targetSmss {
		ss := &smssSys{addr: addr, topic: topic, flush: o.flush, ids: o.ids, cluster: o.cluster}
		if o.withSlave {
			ss.syncSlaves = o.syncSlaves
		}
		inst.sys = ss
	} else {
		inst.sys = &redisSys{addr: addr, key: topic, flush: o.flush, live: o.workload == wE2E}
	}
	if err := inst.sys.prepare(); err != nil {
		r.teardown(inst)
		return nil, err
	}
	return inst, nil
}

func (r *runner) teardown(inst *instance) {
	r.env.stop(inst.slave)
	r.env.stop(inst.srv)
	for _, s := range inst.others {
		r.env.stop(s)
	}
}

// setupNats starts one nats-server, or three in a cluster for a
// replicated stream.
func (r *runner) setupNats(inst *instance) error {
	bin, err := r.natsBinary()
	if err != nil {
		return err
	}
	size := 1
	if r.o.jsReplicas > 1 {
		size = r.o.jsReplicas
	}
	srvs, err := r.env.startNats(r.ctx, bin, size, r.o.flush == 2)
	if err != nil {
		return err
	}
	inst.srv, inst.others = srvs[0], srvs[1:]
	return nil
}

// startSlave attaches a replicating smss slave to the instance's server.
func (r *runner) startSlave(inst *instance) error {
	bin, err := r.smssBinary()
	if err != nil {
		return err
	}
	master := r.o.addr
	if inst.srv != nil {
		master = inst.srv.addr
	}
	inst.slave, err = r.env.startSmss(r.ctx, bin, r.o.flush, master, "")
	return err
}

// measure wraps a timed phase with what every result reports: load
// average, RSS before/during/after, and the data directory afterwards.
type measure struct {
	inst     *instance
	res      *Result
	sampler  *rssSampler
	cpu0     time.Duration
	cpuStart time.Time
	cpuOK    bool
	self0    time.Duration // the benchmark's own CPU time at the start
	slave0   time.Duration // the attached slave's, when there is one
}

func (r *runner) begin(inst *instance, workload string) *measure {
	o := r.o
	m := &measure{inst: inst, res: &Result{
		System:   inst.sys.name(),
		Workload: workload,
		Params: Params{Conns: o.conns, Size: o.size, Records: o.records, Rate: o.rate, Flush: o.flush, IDs: o.ids,
			Durable: inst.sys.durability(), WithSlave: inst.slave != nil},
	}}
	if inst.target == targetSmss {
		m.res.Params.SyncSlaves = o.syncSlaves
	}
	if c, ok := inst.sys.(copier); ok {
		m.res.Params.Copies = c.copies()
	}
	if workload != wPub {
		m.res.Params.Batch = o.batch
		if inst.target == targetJetStream {
			m.res.Params.Ack = o.jsAck
		}
	}
	m.res.LoadAvg[0] = loadAvg()
	m.cpuStart = time.Now()
	m.self0, _ = procCPU(os.Getpid())
	if inst.pid != 0 {
		if rss, _, err := procMem(inst.pid); err == nil {
			m.res.RSS = &RSS{IdleKiB: rss}
			m.sampler = startRSS(inst.pid, rss)
		}
		if cpu, err := procCPU(inst.pid); err == nil {
			m.cpu0, m.cpuOK = cpu, true
		}
		if inst.slave != nil {
			m.slave0, _ = procCPU(inst.slave.pid())
		}
	}
	return m
}

// end finishes the measurement; stored is how many messages the server
// holds, for the disk figure.
func (m *measure) end(stored int64) *Result {
	res := m.res
	res.LoadAvg[1] = loadAvg()
	if m.sampler != nil {
		res.RSS.MaxKiB, res.RSS.SampledAt = m.sampler.finish()
		res.RSS.EndKiB, res.RSS.HWMKiB, _ = procMem(m.inst.pid)
		// VmHWM can read below a VmRSS sampled earlier: the kernel's RSS
		// counters are approximate and it raises the high-water mark only
		// at some events. The peak is at least what was seen.
		res.RSS.HWMKiB = max(res.RSS.HWMKiB, res.RSS.MaxKiB)
		if m.inst.slave != nil {
			res.RSS.SlaveKiB, res.RSS.SlaveHWM, _ = procMem(m.inst.slave.pid())
		}
	}
	if m.cpuOK {
		if cpu, err := procCPU(m.inst.pid); err == nil {
			used := cpu - m.cpu0
			res.CPU = &CPU{Seconds: used.Seconds(), Percent: 100 * used.Seconds() / time.Since(m.cpuStart).Seconds()}
			if res.Messages > 0 {
				res.CPU.USPerMsg = float64(used.Microseconds()) / float64(res.Messages)
			}
		}
		if m.inst.slave != nil && m.slave0 > 0 {
			if cpu, err := procCPU(m.inst.slave.pid()); err == nil {
				res.CPU.SlavePercent = 100 * (cpu - m.slave0).Seconds() / time.Since(m.cpuStart).Seconds()
			}
		}
	}
	if self, err := procCPU(os.Getpid()); err == nil && m.self0 > 0 {
		res.ClientCPU = 100 * (self - m.self0).Seconds() / time.Since(m.cpuStart).Seconds()
	}
	if m.inst.srv != nil && stored > 0 {
		if total, parts, err := diskUsage(m.inst.srv.dataDir); err == nil {
			res.Disk = &Disk{Bytes: total, BytesPerMsg: float64(total) / float64(stored), Parts: parts}
		}
	}
	if res.Seconds > 0 {
		res.MsgsPerSec = float64(res.Messages) / res.Seconds
		res.MBPerSec = float64(res.Messages) * float64(res.Params.Size) / res.Seconds / 1e6
	}
	return res
}

// progress prints a line a second to stderr while a phase runs.
type progress struct {
	n    atomic.Int64
	stop chan struct{}
	done chan struct{}
}

func (r *runner) startProgress(label string, pid int) *progress {
	p := &progress{stop: make(chan struct{}), done: make(chan struct{})}
	if r.o.quiet {
		close(p.done)
		return p
	}
	go func() {
		defer close(p.done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		start, last := time.Now(), int64(0)
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
			}
			n := p.n.Load()
			line := fmt.Sprintf("[%s] %5.1fs %12d msgs %10.0f msgs/s", label, time.Since(start).Seconds(), n, float64(n-last))
			if pid != 0 {
				if rss, _, err := procMem(pid); err == nil {
					line += fmt.Sprintf("  rss %.1f MiB", float64(rss)/1024)
				}
			}
			fmt.Fprintln(r.stderr, line)
			last = n
		}
	}()
	return p
}

func (p *progress) finish() {
	select {
	case <-p.done:
	default:
		close(p.stop)
		<-p.done
	}
}

// pubPlan is what a set of publishers does.
type pubPlan struct {
	conns, size, records int
	rate                 float64       // msgs/s over all connections; 0 = closed loop, as fast as possible
	duration             time.Duration // used when count == 0
	count                int64         // messages
}

// pubStats is what publishing produced.
type pubStats struct {
	hist     *hist // per request
	messages int64
	requests int64
	late     int64
	elapsed  time.Duration
}

// publishAll runs plan against sys: every connection is dialled before the
// clock starts, then each sends one request at a time (paced when a rate is
// set) until the duration or the message count is reached. The first error
// stops every connection.
func (r *runner) publishAll(sys system, plan pubPlan, prog *progress) (*pubStats, error) {
	pubs := make([]publisher, 0, plan.conns)
	defer func() {
		for _, p := range pubs {
			p.close()
		}
	}()
	for i := 0; i < plan.conns; i++ {
		p, err := sys.dialPublisher(plan.size, plan.records)
		if err != nil {
			return nil, err
		}
		pubs = append(pubs, p)
	}
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	// Closing the connections unblocks a worker stuck in a read on Ctrl-C
	// or after another worker's error.
	stopClose := context.AfterFunc(ctx, func() {
		for _, p := range pubs {
			p.close()
		}
	})
	defer stopClose()

	var totalReqs int64
	if plan.count > 0 {
		totalReqs = (plan.count + int64(plan.records) - 1) / int64(plan.records)
	}
	var interval time.Duration
	if plan.rate > 0 {
		interval = time.Duration(float64(plan.conns*plan.records) / plan.rate * float64(time.Second))
	}
	var (
		claimed  atomic.Int64
		errOnce  sync.Once
		firstErr error
		wg       sync.WaitGroup
		hists    = make([]*hist, plan.conns)
		reqs     = make([]int64, plan.conns)
		lates    = make([]int64, plan.conns)
	)
	start := time.Now()
	deadline := start.Add(plan.duration)
	for i, p := range pubs {
		hists[i] = newHist()
		wg.Add(1)
		go func(i int, p publisher) {
			defer wg.Done()
			h := hists[i]
			next := start.Add(interval * time.Duration(i) / time.Duration(plan.conns))
			for ctx.Err() == nil {
				if totalReqs > 0 {
					if claimed.Add(1) > totalReqs {
						return
					}
				} else if !time.Now().Before(deadline) {
					return
				}
				if interval > 0 {
					if d := time.Until(next); d > 0 {
						time.Sleep(d) // pacing to the schedule
					} else if d < -time.Millisecond {
						lates[i]++
					}
					next = next.Add(interval)
				}
				t0 := time.Now()
				if err := p.publish(int64(t0.Sub(r.base))); err != nil {
					if ctx.Err() == nil {
						errOnce.Do(func() { firstErr = fmt.Errorf("%s publish: %w", sys.name(), err) })
					}
					cancel()
					return
				}
				h.record(time.Since(t0))
				reqs[i]++
				if prog != nil {
					prog.n.Add(int64(plan.records))
				}
			}
		}(i, p)
	}
	wg.Wait()
	st := &pubStats{hist: newHist(), elapsed: time.Since(start)}
	if firstErr != nil {
		return nil, firstErr
	}
	if err := r.ctx.Err(); err != nil {
		return nil, err
	}
	for i := range pubs {
		st.hist.merge(hists[i])
		st.requests += reqs[i]
		st.late += lates[i]
	}
	st.messages = st.requests * int64(plan.records)
	return st, nil
}

// runPub is the pub workload.
func (r *runner) runPub(inst *instance) (*Result, error) {
	o := r.o
	if o.withSlave && inst.target == targetSmss {
		if err := r.startSlave(inst); err != nil {
			return nil, err
		}
		if o.syncSlaves > 0 {
			// Timing starts once the slave confirms: a create answered 200
			// went through its confirmation.
			if err := createTopicConfirmed(inst.sys.(*smssSys).addr, inst.sys.(*smssSys).topic+"-sync"); err != nil {
				return nil, err
			}
		}
	}
	m := r.begin(inst, wPub)
	prog := r.startProgress("pub "+inst.sys.name(), inst.pid)
	st, err := r.publishAll(inst.sys, pubPlan{conns: o.conns, size: o.size, records: o.records, rate: o.rate,
		duration: o.duration, count: o.count}, prog)
	prog.finish()
	if err != nil {
		return nil, err
	}
	m.res.Messages, m.res.Requests, m.res.LateSends = st.messages, st.requests, st.late
	m.res.Seconds = st.elapsed.Seconds()
	m.res.Latency = st.hist.summary("request")
	res := m.end(st.messages)
	if inst.slave != nil && inst.srv != nil {
		// The number only counts if the slave kept up: wait for it to hold
		// everything the master wrote.
		_, parts, err := diskUsage(inst.srv.dataDir)
		if err != nil {
			return nil, err
		}
		t0 := time.Now()
		if err := r.waitBinlog(inst.slave, parts["binlog"]); err != nil {
			return nil, err
		}
		res.Extra = map[string]float64{"slave drain ms": float64(time.Since(t0).Microseconds()) / 1e3}
	}
	return res, nil
}

// prefill stores n messages with 100-record requests on 4 connections.
func (r *runner) prefill(sys system, n int64, label string, pid int) (*pubStats, error) {
	prog := r.startProgress(label, pid)
	defer prog.finish()
	return r.publishAll(sys, pubPlan{conns: 4, size: r.o.size, records: 100, count: n}, prog)
}

// runSub is the sub workload: consume o.count stored messages on one
// connection. Latency is per batch (one frame or one XREAD).
func (r *runner) runSub(inst *instance) (*Result, error) {
	o := r.o
	fill, err := r.prefill(inst.sys, o.count, "prefill "+inst.sys.name(), inst.pid)
	if err != nil {
		return nil, err
	}
	stored := fill.messages
	m := r.begin(inst, wSub)
	m.res.Params.Conns, m.res.Params.Records = 1, 100
	prog := r.startProgress("sub "+inst.sys.name(), inst.pid)
	got, batches, h, elapsed, err := r.consume(inst.sys, stored, prog)
	prog.finish()
	if err != nil {
		return nil, err
	}
	m.res.Messages, m.res.Requests = got, batches
	m.res.Seconds = elapsed.Seconds()
	m.res.Latency = h.summary("batch")
	m.res.Extra = map[string]float64{"prefill msgs/s": float64(fill.messages) / fill.elapsed.Seconds()}
	return m.end(stored), nil
}

// consume reads want messages from the start of sys's topic.
func (r *runner) consume(sys system, want int64, prog *progress) (got, batches int64, h *hist, elapsed time.Duration, err error) {
	c, err := sys.dialConsumer(r.o.batch)
	if err != nil {
		return 0, 0, nil, 0, err
	}
	defer c.close()
	stopClose := context.AfterFunc(r.ctx, func() { c.close() })
	defer stopClose()
	h = newHist()
	count := func([]byte) { got++ }
	start := time.Now()
	for got < want {
		t0 := time.Now()
		n, err := c.next(count)
		if err != nil {
			if r.ctx.Err() != nil {
				return 0, 0, nil, 0, r.ctx.Err()
			}
			return 0, 0, nil, 0, fmt.Errorf("%s consume after %d of %d messages: %w", sys.name(), got, want, err)
		}
		if n == 0 {
			return 0, 0, nil, 0, fmt.Errorf("%s: stream exhausted after %d of %d messages", sys.name(), got, want)
		}
		h.record(time.Since(t0))
		batches++
		prog.n.Add(int64(n))
	}
	return got, batches, h, time.Since(start), nil
}

// delivery is what a live subscriber measured.
type delivery struct {
	hist     *hist // publish→delivery per message
	received int64
	pub      *pubStats
}

// measureDelivery publishes on pubSys at o.rate while one live subscriber
// on subSys (the same server, or a slave) records how long each message
// took from the publish call to its arrival.
func (r *runner) measureDelivery(pubSys, subSys system, plan pubPlan, prog *progress) (*delivery, error) {
	c, err := subSys.dialConsumer(r.o.batch)
	if err != nil {
		return nil, err
	}
	defer c.close()
	stopClose := context.AfterFunc(r.ctx, func() { c.close() })
	defer stopClose()

	var (
		received atomic.Int64
		target   atomic.Int64 // set once publishing has finished
		done     = make(chan struct{})
		subErr   error
		h        = newHist()
		bad      int64
	)
	target.Store(-1)
	go func() {
		defer close(done)
		record := func(b []byte) {
			if ts, ok := readStamp(b); ok {
				h.record(time.Duration(r.now() - ts))
			} else {
				bad++
			}
		}
		for {
			n, err := c.next(record)
			if err != nil {
				subErr = err
				return
			}
			got := received.Add(int64(n))
			if prog != nil {
				prog.n.Add(int64(n))
			}
			if t := target.Load(); t >= 0 && got >= t {
				return
			}
		}
	}()
	st, err := r.publishAll(pubSys, plan, nil)
	if err != nil {
		return nil, err
	}
	target.Store(st.messages)
	if received.Load() < st.messages {
		timer := time.NewTimer(r.o.timeout)
		defer timer.Stop()
		select {
		case <-done:
		case <-timer.C:
		case <-r.ctx.Done():
			return nil, r.ctx.Err()
		}
	}
	c.close()
	<-done // the consumer goroutine owns h until it returns
	got := received.Load()
	if got < st.messages {
		if subErr != nil {
			return nil, fmt.Errorf("%s subscriber after %d of %d messages: %w", subSys.name(), got, st.messages, subErr)
		}
		return nil, fmt.Errorf("%s subscriber received %d of %d messages within %s", subSys.name(), got, st.messages, r.o.timeout)
	}
	if bad > 0 {
		return nil, fmt.Errorf("%d delivered messages had no timestamp", bad)
	}
	return &delivery{hist: h, received: got, pub: st}, nil
}

// runE2E is the e2e workload: latency per message from publish to delivery.
func (r *runner) runE2E(inst *instance) (*Result, error) {
	o := r.o
	m := r.begin(inst, wE2E)
	prog := r.startProgress("e2e "+inst.sys.name(), inst.pid)
	d, err := r.measureDelivery(inst.sys, inst.sys, pubPlan{conns: o.conns, size: o.size, records: o.records,
		rate: o.rate, duration: o.duration, count: o.count}, prog)
	prog.finish()
	if err != nil {
		return nil, err
	}
	m.res.Messages, m.res.Requests, m.res.LateSends = d.received, d.pub.requests, d.pub.late
	m.res.Seconds = d.pub.elapsed.Seconds()
	m.res.Latency = d.hist.summary("message")
	if l := d.pub.hist.summary("request"); l != nil {
		m.res.Extra = map[string]float64{"pub p50 µs": l.P50, "pub p99 µs": l.P99}
	}
	return m.end(d.pub.messages), nil
}

// runOne runs the configured workload once against target on fresh servers.
func (r *runner) runOne(target string) (*Result, error) {
	inst, err := r.setup(target)
	if err != nil {
		return nil, err
	}
	defer r.teardown(inst)
	switch r.o.workload {
	case wPub:
		return r.runPub(inst)
	case wSub:
		return r.runSub(inst)
	case wE2E:
		return r.runE2E(inst)
	case wRepl:
		return r.runRepl(inst)
	case wQueue:
		return r.runQueue(inst)
	}
	return nil, errors.New("unknown workload " + r.o.workload)
}
