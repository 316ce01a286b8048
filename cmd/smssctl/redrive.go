package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/smssmq/smss/client"
	"github.com/smssmq/smss/protocol"
)

// redriveGroup is the queue group a redrive reads the dead-letter topic
// through: its acks are the redrive's progress, and its backlog says when
// the redrive has caught up.
const redriveGroup = "smssctl-redrive"

// queueRedrive publishes the dead letters of pos[0] back to their topics.
func queueRedrive(ctx context.Context, g *globals, pos []string, to string, count int) error {
	if err := needArgs(pos, 1, 1, "DEADTOPIC"); err != nil {
		return err
	}
	if count < 0 {
		return usagef("--count %d: must be >= 0", count)
	}
	dead := pos[0]
	c, err := g.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	cctx, cancel := g.ctx(ctx)
	_, err = c.CreateQueue(cctx, dead, client.QueueConfig{Group: redriveGroup, From: "oldest"})
	cancel()
	if err != nil {
		return err
	}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	var done, skipped atomic.Int64
	var pubErr atomic.Pointer[error]
	handler := func(hctx context.Context, m *client.QueueMessage) error {
		target := to
		if target == "" {
			target, _ = m.Header(protocol.DeadHeaderTopic)
		}
		if target == "" {
			skipped.Add(1) // not a dead letter: left in the topic, not redriven again
			return client.Term(errors.New("no " + protocol.DeadHeaderTopic + " header"))
		}
		if err := c.Publish(hctx, target, redriven(dead, m)); err != nil {
			e := fmt.Errorf("publish dead letter eventId %d to %s: %w", m.EventID, target, err)
			pubErr.Store(&e)
			stop()
			return err // nak'd: the next redrive starts with it
		}
		fmt.Fprintf(g.e.stdout, "eventId %d -> %s\n", m.EventID, target)
		if n := done.Add(1); count > 0 && n >= int64(count) {
			stop()
		}
		return nil
	}
	// Caught up: the group has nothing pending.
	go func() {
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-t.C:
			}
			qs, err := c.Queues(rctx, dead, redriveGroup)
			if err == nil && len(qs) == 1 && qs[0].Pending == 0 {
				stop()
				return
			}
		}
	}()
	runErr := c.Work(rctx, dead, redriveGroup, client.WorkerConfig{Consumer: "smssctl"}, handler)
	if p := pubErr.Load(); p != nil {
		return *p
	}
	if runErr != nil && !errors.Is(runErr, context.Canceled) {
		return runErr
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if g.json {
		return writeJSON(g.e.stdout, map[string]any{"deadTopic": dead, "redriven": done.Load(), "skipped": skipped.Load()})
	}
	fmt.Fprintf(g.e.stdout, "redrove %d dead letter(s) from %s", done.Load(), dead)
	if n := skipped.Load(); n > 0 {
		fmt.Fprintf(g.e.stdout, "; %d message(s) without %s left alone", n, protocol.DeadHeaderTopic)
	}
	fmt.Fprintln(g.e.stdout)
	return nil
}

// redriven is d as it was published before it died: the smss-dead-*
// headers and the letter's message id removed, with a message id of the
// redrive's own.
func redriven(dead string, d *client.QueueMessage) *client.Message {
	m := &client.Message{Body: d.Body}
	m.SetHeader(protocol.MsgIDHeader, "redrive/"+strconv.FormatInt(d.EventID, 10)+"/"+dead)
	if len(m.Headers[0].Value) > protocol.MaxMsgIDLen {
		m.Headers[0].Value = m.Headers[0].Value[:protocol.MaxMsgIDLen]
	}
	for _, h := range d.Headers {
		if h.Key == protocol.MsgIDHeader || strings.HasPrefix(h.Key, "smss-dead-") {
			continue
		}
		m.Headers = append(m.Headers, h)
	}
	return m
}
