package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/smssmq/smss/client"
)

const topicUsage = `usage: smssctl topic create NAME [--ttl 2h | --expire-at TIME]
       smssctl topic delete NAME
       smssctl topic list
       smssctl topic info NAME

--ttl is a lifetime from now (minimum 10s); --expire-at an absolute time in
RFC 3339 (2026-01-02T15:04:05Z) or Unix milliseconds. Without either the
topic is permanent.
`

func runTopic(ctx context.Context, g *globals, args []string) int {
	if len(args) == 0 {
		fmt.Fprint(g.e.stderr, topicUsage)
		return exitUsage
	}
	action, args := args[0], args[1:]
	fs := g.flagSet("topic "+action, topicUsage)
	var ttl durationFlag
	var expireAt string
	switch action {
	case "create":
		fs.Var(&ttl, "ttl", "lifetime from now, e.g. 2h or 7d")
		fs.StringVar(&expireAt, "expire-at", "", "absolute expiry: RFC 3339 time or Unix ms")
	case "delete", "list", "info":
	case "-h", "-help", "--help", "help":
		fmt.Fprint(g.e.stdout, topicUsage)
		return exitOK
	default:
		fmt.Fprintf(g.e.stderr, "smssctl: unknown topic action %q\n\n%s", action, topicUsage)
		return exitUsage
	}
	pos, code, done := parse(fs, args, g, false)
	if done {
		return code
	}
	var err error
	switch action {
	case "create":
		err = topicCreate(ctx, g, pos, ttl, expireAt)
	case "delete":
		err = topicDelete(ctx, g, pos)
	case "list":
		err = topicList(ctx, g, pos)
	case "info":
		err = topicInfo(ctx, g, pos)
	}
	if err != nil {
		return fail(g, err)
	}
	return exitOK
}

func parseTime(s string) (time.Time, error) {
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.UnixMilli(ms), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, usagef("--expire-at %q is neither RFC 3339 nor Unix milliseconds", s)
	}
	return t, nil
}

func topicCreate(ctx context.Context, g *globals, pos []string, ttl durationFlag, expireAt string) error {
	if err := needArgs(pos, 1, 1, "topic name"); err != nil {
		return err
	}
	name := pos[0]
	var until time.Time
	switch {
	case ttl.set && expireAt != "":
		return usagef("--ttl and --expire-at are exclusive")
	case ttl.set:
		if ttl.d <= 0 {
			return usagef("--ttl must be positive")
		}
		until = time.Now().Add(ttl.d)
	case expireAt != "":
		t, err := parseTime(expireAt)
		if err != nil {
			return err
		}
		until = t
	}
	c, err := g.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	rctx, cancel := g.ctx(ctx)
	defer cancel()
	if until.IsZero() {
		err = c.CreateTopic(rctx, name)
	} else {
		err = c.CreateTopicUntil(rctx, name, until)
	}
	if err != nil {
		return err
	}
	if g.json {
		return writeJSON(g.e.stdout, map[string]any{"topic": name, "created": true, "expireAt": msOrZero(until)})
	}
	if until.IsZero() {
		fmt.Fprintf(g.e.stdout, "created topic %s (permanent)\n", name)
	} else {
		fmt.Fprintf(g.e.stdout, "created topic %s (expires %s)\n", name, until.Format(time.RFC3339))
	}
	return nil
}

func msOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func topicDelete(ctx context.Context, g *globals, pos []string) error {
	if err := needArgs(pos, 1, 1, "topic name"); err != nil {
		return err
	}
	c, err := g.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	rctx, cancel := g.ctx(ctx)
	defer cancel()
	if err := c.DeleteTopic(rctx, pos[0]); err != nil {
		return err
	}
	if g.json {
		return writeJSON(g.e.stdout, map[string]any{"topic": pos[0], "deleted": true})
	}
	fmt.Fprintf(g.e.stdout, "deleted topic %s\n", pos[0])
	return nil
}

func topicList(ctx context.Context, g *globals, pos []string) error {
	if err := needArgs(pos, 0, 0, ""); err != nil {
		return err
	}
	c, err := g.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	rctx, cancel := g.ctx(ctx)
	defer cancel()
	topics, err := c.Topics(rctx)
	if err != nil {
		return err
	}
	if g.json {
		if topics == nil {
			topics = []client.TopicInfo{}
		}
		return writeJSON(g.e.stdout, topics)
	}
	if len(topics) == 0 {
		fmt.Fprintln(g.e.stdout, "no topics")
		return nil
	}
	tw := tabwriter.NewWriter(g.e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tCREATED\tEXPIRES\tCREATE EVENT\tSTATE")
	now := time.Now()
	for i := range topics {
		t := &topics[i]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", t.Name, fmtTime(t.CreatedAt), expiry(t, now), t.CreateEventID, state(t, now))
	}
	return tw.Flush()
}

func topicInfo(ctx context.Context, g *globals, pos []string) error {
	if err := needArgs(pos, 1, 1, "topic name"); err != nil {
		return err
	}
	c, err := g.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	rctx, cancel := g.ctx(ctx)
	defer cancel()
	t, err := c.TopicInfo(rctx, pos[0])
	if err != nil {
		return err
	}
	if g.json {
		return writeJSON(g.e.stdout, t)
	}
	now := time.Now()
	tw := tabwriter.NewWriter(g.e.stdout, 0, 4, 1, ' ', 0)
	fmt.Fprintf(tw, "name:\t%s\n", t.Name)
	fmt.Fprintf(tw, "created:\t%s\n", fmtTime(t.CreatedAt))
	fmt.Fprintf(tw, "expires:\t%s\n", expiry(t, now))
	fmt.Fprintf(tw, "create eventId:\t%d\n", t.CreateEventID)
	fmt.Fprintf(tw, "state changed:\t%s (eventId %d)\n", fmtTime(t.StateChangeTime), t.StateChangeEventID)
	fmt.Fprintf(tw, "state:\t%s\n", state(t, now))
	fmt.Fprintf(tw, "directory:\t%s\n", t.Root)
	return tw.Flush()
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05 MST")
}

func expiry(t *client.TopicInfo, now time.Time) string {
	if t.Permanent() {
		return "never"
	}
	if t.Expired(now) {
		return fmtTime(t.ExpireAt) + " (expired)"
	}
	return fmtTime(t.ExpireAt) + " (in " + t.ExpireAt.Sub(now).Round(time.Second).String() + ")"
}

func state(t *client.TopicInfo, now time.Time) string {
	switch {
	case t.State == client.TopicDeleted:
		return "deleted"
	case t.Expired(now):
		return "expired"
	case t.State == client.TopicNormal:
		return "normal"
	}
	return "state " + strconv.Itoa(int(t.State))
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

const pingUsage = `usage: smssctl ping

Sends an alive request and prints the round-trip time.
`

func runPing(ctx context.Context, g *globals, args []string) int {
	fs := g.flagSet("ping", pingUsage)
	pos, code, done := parse(fs, args, g, false)
	if done {
		return code
	}
	if err := needArgs(pos, 0, 0, ""); err != nil {
		return fail(g, err)
	}
	c, err := g.dial(ctx)
	if err != nil {
		return fail(g, err)
	}
	defer c.Close()
	rctx, cancel := g.ctx(ctx)
	defer cancel()
	start := time.Now()
	if err := c.Alive(rctx); err != nil {
		return fail(g, err)
	}
	rtt := time.Since(start)
	if g.json {
		writeJSON(g.e.stdout, map[string]any{"addr": g.addr, "alive": true, "rttMs": float64(rtt.Microseconds()) / 1000})
		return exitOK
	}
	fmt.Fprintf(g.e.stdout, "%s is alive (%v)\n", g.addr, rtt.Round(time.Microsecond))
	return exitOK
}
