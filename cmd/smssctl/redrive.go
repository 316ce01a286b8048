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

// redriveWho is the stored position a redrive keeps on the dead-letter
// topic.
const redriveWho = "smssctl-redrive"

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
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var done, skipped atomic.Int64
	var pubErr atomic.Pointer[error]
	s, err := c.NewSubscriber(client.SubscriberConfig{
		Topic: dead, Who: redriveWho, Resume: true, ResumeNew: client.ResumeFromStart,
		// One letter a batch: an ack never covers a letter not yet published.
		BatchSize: 1,
		Handler: func(hctx context.Context, batch []client.Delivery) client.AckAction {
			for i := range batch {
				d := &batch[i]
				target := to
				if target == "" {
					target, _ = d.Header(protocol.DeadHeaderTopic)
				}
				if target == "" {
					skipped.Add(1) // not a dead letter: left where it is
					continue
				}
				if err := c.Publish(hctx, target, redriven(dead, d)); err != nil {
					e := fmt.Errorf("publish dead letter eventId %d to %s: %w", d.EventID, target, err)
					pubErr.Store(&e)
					cancel()
					return client.StopWithoutAck // the next redrive starts with it
				}
				fmt.Fprintf(g.e.stdout, "eventId %d -> %s\n", d.EventID, target)
				if n := done.Add(1); count > 0 && n >= int64(count) {
					return client.AckAndStop
				}
			}
			return client.Ack
		},
	})
	if err != nil {
		return err
	}
	// Caught up: the stored position has no message after it.
	go func() {
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-t.C:
			}
			cs, err := c.Cursors(rctx, dead)
			if err != nil {
				continue
			}
			for _, cur := range cs {
				if cur.Who == redriveWho && cur.Lag == 0 {
					cancel()
					return
				}
			}
		}
	}()
	runErr := s.Run(rctx)
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
func redriven(dead string, d *client.Delivery) *client.Message {
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
