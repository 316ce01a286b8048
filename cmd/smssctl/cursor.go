package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"text/tabwriter"

	"github.com/smssmq/smss/client"
)

const cursorUsage = `usage: smssctl cursor list [TOPIC]
       smssctl cursor set TOPIC WHO EVENTID
       smssctl cursor reset TOPIC WHO

The server stores, per (topic, who), the last eventId the subscriber
acknowledged; a subscription from eventId -1 (sub --resume) resumes after it.
list prints the positions (of one topic or all) with the number of messages
after each (lag) and whether the who is subscribed now; set stores EVENTID as
the position (the next resume starts after it); reset removes it (the next
resume starts as a new who). set and reset go to the master and are refused
while the who is subscribed on it. Needs the admin role when authentication
is on.
`

func runCursor(ctx context.Context, g *globals, args []string) int {
	fs := g.flagSet("cursor", cursorUsage)
	pos, code, done := parse(fs, args, g, false)
	if done {
		return code
	}
	if len(pos) == 0 {
		return fail(g, usagef("cursor: missing list, set or reset"))
	}
	op, pos := pos[0], pos[1:]
	var eventID int64
	switch op {
	case "list":
		if err := needArgs(pos, 0, 1, "TOPIC"); err != nil {
			return fail(g, err)
		}
	case "set":
		if err := needArgs(pos, 3, 3, "TOPIC WHO EVENTID"); err != nil {
			return fail(g, err)
		}
		v, err := strconv.ParseInt(pos[2], 10, 64)
		if err != nil || v < 0 {
			return fail(g, usagef("cursor set: EVENTID %q is not an eventId >= 0", pos[2]))
		}
		eventID = v
	case "reset":
		if err := needArgs(pos, 2, 2, "TOPIC WHO"); err != nil {
			return fail(g, err)
		}
	default:
		return fail(g, usagef("cursor: unknown operation %q (list, set or reset)", op))
	}
	c, err := g.dial(ctx)
	if err != nil {
		return fail(g, err)
	}
	defer c.Close()
	rctx, cancel := g.ctx(ctx)
	defer cancel()
	switch op {
	case "list":
		topic := ""
		if len(pos) == 1 {
			topic = pos[0]
		}
		list, err := c.Cursors(rctx, topic)
		if err != nil {
			return fail(g, noCursors(g, err))
		}
		if g.json {
			writeJSON(g.e.stdout, list)
			return exitOK
		}
		tw := tabwriter.NewWriter(g.e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TOPIC\tWHO\tEVENTID\tSTORED\tLAG\tACTIVE")
		for _, cu := range list {
			lag := strconv.FormatInt(cu.Lag, 10)
			if cu.Lag < 0 {
				lag = "?"
			}
			stored := strconv.FormatInt(cu.Stored, 10)
			if cu.Stored < 0 {
				stored = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%v\n", cu.Topic, cu.Who, cu.EventID, stored, lag, cu.Active)
		}
		tw.Flush()
		return exitOK
	case "set":
		if err := c.SetCursor(rctx, pos[0], pos[1], eventID); err != nil {
			return fail(g, noCursors(g, err))
		}
		if g.json {
			writeJSON(g.e.stdout, map[string]any{"topic": pos[0], "who": pos[1], "eventId": eventID})
			return exitOK
		}
		fmt.Fprintf(g.e.stdout, "%s %s: position set to %d\n", pos[0], pos[1], eventID)
	case "reset":
		if err := c.ResetCursor(rctx, pos[0], pos[1]); err != nil {
			return fail(g, noCursors(g, err))
		}
		if g.json {
			writeJSON(g.e.stdout, map[string]any{"topic": pos[0], "who": pos[1], "reset": true})
			return exitOK
		}
		fmt.Fprintf(g.e.stdout, "%s %s: position removed\n", pos[0], pos[1])
	}
	return exitOK
}

// noCursors explains an original server's refusal.
func noCursors(g *globals, err error) error {
	if errors.Is(err, client.ErrNoCursors) {
		return fmt.Errorf("%w (the server at %s does not support it: an original smss or an older version)", err, g.addr)
	}
	return err
}
