package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/smssmq/smss/client"
)

const queueUsage = `usage: smssctl queue create TOPIC GROUP [--ack-wait 30s] [--max-deliver N] [--backoff 1s,5s,30s]
                         [--dead-letter TOPIC] [--from oldest|newest|EVENTID] [--max-in-flight N]
       smssctl queue info TOPIC GROUP
       smssctl queue list [TOPIC]
       smssctl queue delete TOPIC GROUP
       smssctl queue redrive DEADTOPIC [--to TOPIC] [--count N]

A queue group shares the messages of a topic among competing consumers
(smssctl work, client.Worker): each message goes to one consumer, comes back
when it is not acked within --ack-wait (or is nak'd), after the --backoff
step of its delivery count (the last step repeats; none: at once), and goes
to the --dead-letter topic after --max-deliver deliveries (default 5 with a
dead-letter topic, else no limit; without one such a message is dropped).
--from is where a new group starts: newest (default; messages published
from now on), oldest, or after EVENTID. --max-in-flight caps the messages a
consumer holds unacknowledged (default 1000). Creating a group again with
the same settings succeeds; other settings are refused. The groups live on
the master. info shows the group's counters and consumers, list every
group (of TOPIC). redrive publishes the dead letters of DEADTOPIC back to
the topic each came from (its smss-dead-topic header, or --to), without the
smss-dead-* headers, each with a message id of its own so that a repeated or
interrupted redrive publishes it once, and stops when it has caught up (or
after --count letters). It reads DEADTOPIC through the queue group
"smssctl-redrive" (created from the oldest message the first time): its acks
are the progress, so the next redrive starts after the last letter redriven.
`

func runQueue(ctx context.Context, g *globals, args []string) int {
	if len(args) == 0 {
		fmt.Fprint(g.e.stderr, queueUsage)
		return exitUsage
	}
	action, args := args[0], args[1:]
	fs := g.flagSet("queue "+action, queueUsage)
	var ackWait durationFlag
	var maxDeliver, maxInFlight *int
	var backoff, deadLetter, from, to *string
	var count *int
	switch action {
	case "create":
		fs.Var(&ackWait, "ack-wait", "how long a consumer holds a message before it is redelivered (default 30s)")
		maxDeliver = fs.Int("max-deliver", 0, "deliveries before a message is dead-lettered (0: 5 with --dead-letter, else no limit)")
		backoff = fs.String("backoff", "", "comma-separated delays before the 1st, 2nd, ... redelivery, e.g. 1s,5s,30s")
		deadLetter = fs.String("dead-letter", "", "topic dead letters go to (created when missing)")
		from = fs.String("from", "", "where the group starts: newest (default), oldest or an eventId")
		maxInFlight = fs.Int("max-in-flight", 0, "unacknowledged messages per consumer (default 1000)")
	case "redrive":
		to = fs.String("to", "", "publish every letter to this topic instead of the one it came from")
		count = fs.Int("count", 0, "stop after this many letters (0: all there are)")
	case "info", "list", "delete":
	case "-h", "-help", "--help", "help":
		fmt.Fprint(g.e.stdout, queueUsage)
		return exitOK
	default:
		fmt.Fprintf(g.e.stderr, "smssctl: unknown queue action %q\n\n%s", action, queueUsage)
		return exitUsage
	}
	pos, code, done := parse(fs, args, g, false)
	if done {
		return code
	}
	var err error
	switch action {
	case "create":
		var cfg client.QueueConfig
		cfg, err = queueConfig(pos, ackWait, *maxDeliver, *backoff, *deadLetter, *from, *maxInFlight)
		if err == nil {
			err = queueCreate(ctx, g, pos[0], cfg)
		}
	case "info":
		err = queueInfo(ctx, g, pos)
	case "list":
		err = queueList(ctx, g, pos)
	case "delete":
		err = queueDelete(ctx, g, pos)
	case "redrive":
		err = queueRedrive(ctx, g, pos, *to, *count)
	}
	if err != nil {
		return fail(g, noQueues(g, err))
	}
	return exitOK
}

// queueConfig builds a create's settings from the flags, checked here as
// the server checks them so that a mistake is a usage error.
func queueConfig(pos []string, ackWait durationFlag, maxDeliver int, backoff, deadLetter, from string, maxInFlight int) (client.QueueConfig, error) {
	if err := needArgs(pos, 2, 2, "TOPIC GROUP"); err != nil {
		return client.QueueConfig{}, err
	}
	cfg := client.QueueConfig{Group: pos[1], MaxDeliver: maxDeliver, DeadLetter: deadLetter, From: from, MaxInFlight: maxInFlight}
	if ackWait.set {
		if ackWait.d < time.Millisecond {
			return cfg, usagef("--ack-wait %v is under a millisecond", ackWait.d)
		}
		cfg.AckWaitMs = ackWait.d.Milliseconds()
	}
	if backoff != "" {
		for _, s := range strings.Split(backoff, ",") {
			d, err := parseDuration(strings.TrimSpace(s))
			if err != nil {
				return cfg, usagef("--backoff: %v", err)
			}
			cfg.BackoffMs = append(cfg.BackoffMs, d.Milliseconds())
		}
	}
	check := cfg
	if err := check.Normalize(); err != nil {
		return cfg, usagef("%v", err)
	}
	return cfg, nil
}

func queueCreate(ctx context.Context, g *globals, topic string, cfg client.QueueConfig) error {
	c, err := g.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	rctx, cancel := g.ctx(ctx)
	defer cancel()
	info, err := c.CreateQueue(rctx, topic, cfg)
	if err != nil {
		return err
	}
	if g.json {
		return writeJSON(g.e.stdout, info)
	}
	fmt.Fprintf(g.e.stdout, "queue group %s on %s: %s\n", info.Config.Group, info.Topic, settings(&info.Config))
	return nil
}

// settings describes a group's settings on one line.
func settings(c *client.QueueConfig) string {
	var b strings.Builder
	fmt.Fprintf(&b, "ack wait %v", time.Duration(c.AckWaitMs)*time.Millisecond)
	if c.MaxDeliver > 0 {
		fmt.Fprintf(&b, ", max deliver %d", c.MaxDeliver)
	} else {
		b.WriteString(", no delivery limit")
	}
	if len(c.BackoffMs) > 0 {
		steps := make([]string, len(c.BackoffMs))
		for i, ms := range c.BackoffMs {
			steps[i] = (time.Duration(ms) * time.Millisecond).String()
		}
		fmt.Fprintf(&b, ", backoff %s", strings.Join(steps, ","))
	}
	if c.DeadLetter != "" {
		fmt.Fprintf(&b, ", dead letters to %s", c.DeadLetter)
	}
	fmt.Fprintf(&b, ", max in flight %d per consumer, %d per group, from %s", c.MaxInFlight, c.MaxInFlightGroup, c.From)
	return b.String()
}

func queueInfo(ctx context.Context, g *globals, pos []string) error {
	if err := needArgs(pos, 2, 2, "TOPIC GROUP"); err != nil {
		return err
	}
	c, err := g.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	rctx, cancel := g.ctx(ctx)
	defer cancel()
	qs, err := c.Queues(rctx, pos[0], pos[1])
	if err != nil {
		return err
	}
	var q *client.QueueInfo
	for i := range qs {
		if qs[i].Topic == pos[0] && qs[i].Config.Group == pos[1] {
			q = &qs[i]
		}
	}
	if q == nil {
		return fmt.Errorf("no queue group %s on topic %s", pos[1], pos[0])
	}
	if g.json {
		return writeJSON(g.e.stdout, q)
	}
	tw := tabwriter.NewWriter(g.e.stdout, 0, 4, 1, ' ', 0)
	fmt.Fprintf(tw, "topic:\t%s\n", q.Topic)
	fmt.Fprintf(tw, "group:\t%s\n", q.Config.Group)
	fmt.Fprintf(tw, "settings:\t%s\n", settings(&q.Config))
	fmt.Fprintf(tw, "pending:\t%d (not delivered yet %d, in flight %d, waiting for redelivery %d)\n", q.Pending, q.Backlog, q.InFlight, q.Waiting)
	fmt.Fprintf(tw, "oldest pending:\t%s\n", age(q.OldestPendingMs))
	fmt.Fprintf(tw, "delivered:\t%d (redelivered %d)\n", q.Delivered, q.Redelivered)
	fmt.Fprintf(tw, "acked:\t%d\n", q.Acked)
	fmt.Fprintf(tw, "dead-lettered:\t%d\n", q.DeadLettered)
	fmt.Fprintf(tw, "dropped:\t%d\n", q.Dropped)
	fmt.Fprintf(tw, "last handed out:\teventId %d\n", q.Next)
	fmt.Fprintf(tw, "consumers:\t%d\n", len(q.Consumers))
	tw.Flush()
	if len(q.Consumers) == 0 {
		return nil
	}
	tw = tabwriter.NewWriter(g.e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  CONSUMER\tADDR\tIN FLIGHT\tACKED\tCONNECTED FOR")
	for _, cs := range q.Consumers {
		addr := cs.Addr
		if addr == "" {
			addr = "-"
		}
		// SinceMs is when the consumer joined, in Unix ms.
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%d\t%s\n", cs.Name, addr, cs.InFlight, cs.Acked, age(time.Now().UnixMilli()-cs.SinceMs))
	}
	return tw.Flush()
}

// age formats a duration in ms as a round age ("-" for none).
func age(ms int64) string {
	if ms <= 0 {
		return "-"
	}
	d := time.Duration(ms) * time.Millisecond
	if d < time.Minute {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

func queueList(ctx context.Context, g *globals, pos []string) error {
	if err := needArgs(pos, 0, 1, "TOPIC"); err != nil {
		return err
	}
	topic := ""
	if len(pos) == 1 {
		topic = pos[0]
	}
	c, err := g.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	rctx, cancel := g.ctx(ctx)
	defer cancel()
	qs, err := c.Queues(rctx, topic, "")
	if err != nil {
		return err
	}
	if g.json {
		return writeJSON(g.e.stdout, qs)
	}
	if len(qs) == 0 {
		fmt.Fprintln(g.e.stdout, "no queue groups")
		return nil
	}
	tw := tabwriter.NewWriter(g.e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tGROUP\tPENDING\tIN FLIGHT\tWAITING\tREDELIVERED\tDEAD\tCONSUMERS\tOLDEST")
	for _, q := range qs {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", q.Topic, q.Config.Group, q.Pending, q.InFlight, q.Waiting,
			q.Redelivered, q.DeadLettered, len(q.Consumers), age(q.OldestPendingMs))
	}
	return tw.Flush()
}

func queueDelete(ctx context.Context, g *globals, pos []string) error {
	if err := needArgs(pos, 2, 2, "TOPIC GROUP"); err != nil {
		return err
	}
	c, err := g.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	rctx, cancel := g.ctx(ctx)
	defer cancel()
	if err := c.DeleteQueue(rctx, pos[0], pos[1]); err != nil {
		return err
	}
	if g.json {
		return writeJSON(g.e.stdout, map[string]any{"topic": pos[0], "group": pos[1], "deleted": true})
	}
	fmt.Fprintf(g.e.stdout, "deleted queue group %s of %s\n", pos[1], pos[0])
	return nil
}

// noQueues explains an original server's refusal.
func noQueues(g *globals, err error) error {
	if errors.Is(err, client.ErrNoQueues) {
		return fmt.Errorf("%w (the server at %s does not support them: an original smss or an older version)", err, g.addr)
	}
	return err
}

// itoa is strconv.Itoa for the environment of --exec.
func itoa(n int64) string { return strconv.FormatInt(n, 10) }
