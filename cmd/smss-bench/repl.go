package main

import (
	"fmt"
	"time"

	"github.com/smssmq/smss/protocol"
)

// runRepl is the repl workload (smss only, docs/protocol.md §4): publish a backlog on
// the master, start a slave from eventId 0 and time until it holds the
// whole backlog; then publish at o.rate on the master with a live
// subscriber on the slave and measure publish→delivery lag through it.
//
// Catch-up is judged by the slave's binlog reaching the master's size (the
// slave writes byte-identical blocks, §4.4), which costs the slave nothing;
// then the backlog is read back from the slave to check it is all there.
// Against --addr the master's files are not visible, so a subscriber on the
// slave reading the whole backlog is the clock instead.
func (r *runner) runRepl(inst *instance) (*Result, error) {
	o := r.o
	master := inst.sys.(*smssSys)
	fill, err := r.prefill(master, o.backlog, "backlog smss", inst.pid)
	if err != nil {
		return nil, err
	}
	backlog := fill.messages
	var masterBinlog int64 = -1
	if inst.srv != nil {
		_, parts, err := diskUsage(inst.srv.dataDir)
		if err != nil {
			return nil, err
		}
		masterBinlog = parts["binlog"]
	}
	m := r.begin(inst, wRepl)
	m.res.Params.Conns = 1
	extra := map[string]float64{"backlog msgs": float64(backlog),
		"backlog fill msgs/s": float64(backlog) / fill.elapsed.Seconds()}
	m.res.Extra = extra

	t0 := time.Now()
	if err := r.startSlave(inst); err != nil {
		return nil, err
	}
	extra["slave listening ms"] = float64(time.Since(t0).Microseconds()) / 1e3
	slave := &smssSys{addr: inst.slave.addr, topic: master.topic, flush: o.flush}

	var catchUp time.Duration
	if masterBinlog > 0 {
		if err := r.waitBinlog(inst.slave, masterBinlog); err != nil {
			return nil, err
		}
		catchUp = time.Since(t0)
		prog := r.startProgress("verify slave", inst.slave.pid())
		got, _, _, elapsed, err := r.consume(slave, backlog, prog)
		prog.finish()
		if err != nil {
			return nil, fmt.Errorf("read the backlog back from the slave: %w", err)
		}
		extra["slave sub msgs/s"] = float64(got) / elapsed.Seconds()
	} else {
		prog := r.startProgress("catch-up", 0)
		_, _, _, _, err := r.consume(slave, backlog, prog)
		prog.finish()
		if err != nil {
			return nil, fmt.Errorf("read the backlog from the slave: %w", err)
		}
		catchUp = time.Since(t0)
	}
	extra["catch-up s"] = catchUp.Seconds()
	extra["catch-up msgs/s"] = float64(backlog) / catchUp.Seconds()

	// Lag: a fresh topic, so the live subscriber on the slave starts empty.
	lagTopic := master.topic + "-lag"
	if err := createTopic(master.addr, lagTopic); err != nil {
		return nil, err
	}
	if err := r.waitTopic(inst.slave.addr, lagTopic); err != nil {
		return nil, err
	}
	prog := r.startProgress("lag via slave", inst.pid)
	d, err := r.measureDelivery(&smssSys{addr: master.addr, topic: lagTopic, flush: o.flush},
		&smssSys{addr: inst.slave.addr, topic: lagTopic, flush: o.flush},
		pubPlan{conns: o.conns, size: o.size, records: o.records, rate: o.rate, duration: o.duration}, prog)
	prog.finish()
	if err != nil {
		return nil, fmt.Errorf("lag phase: %w", err)
	}
	m.res.Messages, m.res.Requests, m.res.LateSends = d.received, d.pub.requests, d.pub.late
	m.res.Seconds = d.pub.elapsed.Seconds()
	m.res.Latency = d.hist.summary("message")
	return m.end(backlog + d.pub.messages), nil
}

// waitBinlog polls the slave's binlog size until it reaches want bytes.
// The slave is another process: there is nothing to wait on but its files.
func (r *runner) waitBinlog(slave *server, want int64) error {
	deadline := time.Now().Add(r.o.timeout)
	prog := r.startProgress("catch-up (binlog bytes)", slave.pid())
	defer prog.finish()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		_, parts, err := diskUsage(slave.dataDir)
		if err != nil {
			return err
		}
		have := parts["binlog"]
		prog.n.Store(have)
		if have >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("slave binlog at %d of %d bytes after %s:\n%s", have, want, r.o.timeout, slave.logTail())
		}
		select {
		case <-r.ctx.Done():
			return r.ctx.Err()
		case <-slave.exited:
			return fmt.Errorf("slave exited (%v):\n%s", slave.err, slave.logTail())
		case <-tick.C:
		}
	}
}

// waitTopic polls topic info on addr until the topic exists there.
func (r *runner) waitTopic(addr, topic string) error {
	deadline := time.Now().Add(30 * time.Second)
	req, err := protocol.AppendTopicInfo(nil, []byte(topic), nil)
	if err != nil {
		return err
	}
	c, err := dialSmss(addr)
	if err != nil {
		return err
	}
	defer c.close()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		c.c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.c.Write(req); err != nil {
			return fmt.Errorf("topic info: %w", err)
		}
		_, err := protocol.ReadReply(c.r, protocol.ReplyJSON, 1<<20)
		if err == nil {
			return nil
		}
		if !protocol.IsBizError(err) {
			return fmt.Errorf("topic info: %w", err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("topic %s did not reach the slave within 30 s: %w", topic, err)
		}
		select {
		case <-r.ctx.Done():
			return r.ctx.Err()
		case <-tick.C:
		}
	}
}
