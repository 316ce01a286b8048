package main

import (
	"context"
	"fmt"
	"io"

	"github.com/smssmq/smss/client"
)

const pubUsage = `usage: smssctl pub TOPIC [--header k=v]... [--delay 5s] [--id ID | --no-id] [MESSAGE | -]

Publishes one message. The body is MESSAGE, or standard input when MESSAGE
is "-" or absent. Headers keep the order given. --delay (at least 1s)
publishes it that long from now.

The message carries a message id (header smss-msg-id): a random one, or
--id (1..128 bytes). A lost reply or a timeout is retried with the same id,
which a dedupe-capable server stores once; running pub again with the same
--id is recognised too within the server's dedupe window. --no-id sends no
id (and then does not retry what may have been stored).
`

// maxStdinBody bounds a body read from standard input; the server's default
// limit is 8 MiB per request.
const maxStdinBody = 64 << 20

func runPub(ctx context.Context, g *globals, args []string) int {
	fs := g.flagSet("pub", pubUsage)
	var headers headerFlag
	var delay durationFlag
	fs.Var(&headers, "header", "message header `key=value` (repeatable)")
	fs.Var(&delay, "delay", "publish after this delay, e.g. 5s")
	var id optString
	fs.Var(&id, "id", "message `id` (1..128 bytes; default: a random one)")
	fs.BoolVar(&g.noIDs, "no-id", false, "send no message id")
	pos, code, done := parse(fs, args, g, false)
	if done {
		return code
	}
	if err := needArgs(pos, 1, 2, "topic"); err != nil {
		return fail(g, err)
	}
	if delay.set && delay.d <= 0 {
		return fail(g, usagef("--delay must be positive"))
	}
	switch {
	case id.set && g.noIDs:
		return fail(g, usagef("--id and --no-id exclude each other"))
	case id.set && (len(id.v) == 0 || len(id.v) > client.MaxMessageIDLen):
		return fail(g, usagef("--id is %d bytes; a message id is 1..%d bytes", len(id.v), client.MaxMessageIDLen))
	}
	topic := pos[0]
	var body []byte
	if len(pos) == 2 && pos[1] != "-" {
		body = []byte(pos[1])
	} else {
		b, err := io.ReadAll(io.LimitReader(g.e.stdin, maxStdinBody+1))
		if err != nil {
			return fail(g, fmt.Errorf("read message from stdin: %w", err))
		}
		if len(b) > maxStdinBody {
			return fail(g, usagef("message on stdin exceeds %d bytes", maxStdinBody))
		}
		body = b
	}
	msg := &client.Message{Headers: headers, Body: body}
	if id.set {
		msg.SetHeader(client.MessageIDHeader, id.v)
	}
	c, err := g.dial(ctx)
	if err != nil {
		return fail(g, err)
	}
	defer c.Close()
	rctx, cancel := g.ctx(ctx)
	defer cancel()
	if delay.set {
		err = c.PublishDelay(rctx, topic, delay.d, msg)
	} else {
		err = c.Publish(rctx, topic, msg)
	}
	if err != nil {
		return fail(g, err)
	}
	if g.json {
		writeJSON(g.e.stdout, map[string]any{"topic": topic, "published": 1, "bytes": len(body), "delayMs": delay.d.Milliseconds()})
		return exitOK
	}
	if delay.set {
		fmt.Fprintf(g.e.stdout, "published 1 message (%d bytes) to %s, delayed %v\n", len(body), topic, delay.d)
	} else {
		fmt.Fprintf(g.e.stdout, "published 1 message (%d bytes) to %s\n", len(body), topic)
	}
	return exitOK
}

// optString is a string flag that records whether it was given, so that
// an explicit empty value is refused rather than taken as absent.
type optString struct {
	v   string
	set bool
}

func (o *optString) String() string { return o.v }

func (o *optString) Set(s string) error {
	o.v, o.set = s, true
	return nil
}
