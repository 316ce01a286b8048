package main

// smssctl diverged: read what `smss -rejoin` moved aside (issue 16) and,
// on request, publish those messages again to the current master.

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/client"
	"github.com/smssmq/smss/protocol"
)

const divergedUsage = `usage: smssctl diverged DIR [--republish] [--create-topics] [--no-check]

Lists what "smss -rejoin" moved aside: DIR is <store.path>/diverged/<time>/
(manifest.json and the moved binlog files). One line per moved binlog
block: eventIds, command, topic, messages, and each message's headers and
body (--json: one object per block).

--republish publishes the moved messages again to the server (--addr), in
eventId order, each block as one request: pub and delay-apply blocks as
messages, a delay whose apply was not moved as a delayed message for the
time that remains (at once when due). A delay-apply of a delay stored
before the common prefix is skipped: the master holds that delay and fires
it itself. Blocks of the reserved topic __cursors (stored consumer
positions) are skipped. They get new eventIds but keep their message ids
(header smss-msg-id); a block without one gets an id derived from its
bytes, so running --republish again stores nothing twice.

Before publishing it reads the master's binlog after the common prefix
(the replica stream: with authentication, a user with the replication
role) and skips every block whose message id the master already holds
there (a client that retried the write on the new master), however old:
the server's dedupe window does not bound this check. It refuses when the
master does not hold the common prefix (its binlog ends before it, or
parts from it there): the directory is then not from this master's
history. --no-check skips both (a master without the replica stream, or
one that no longer retains the prefix), leaving duplicates to the
server's dedupe window. Progress goes to stderr every 2 s.

A topic the server does not have is an error, unless --create-topics
creates it (permanent).
`

// movedManifest is the part of manifest.json this command reads.
type movedManifest struct {
	CommonLastEventID int64 `json:"commonLastEventId"`
	BinlogFiles       []struct {
		Path string `json:"path"`
	} `json:"binlogFiles"`
}

// movedBlock is one moved binlog block as listed.
type movedBlock struct {
	EventID     int64            `json:"eventId"`
	LastEventID int64            `json:"lastEventId"`
	Cmd         string           `json:"cmd"`
	Topic       string           `json:"topic"`
	TriggerMs   int64            `json:"triggerMs,omitempty"`    // delay, delay-apply
	DelayID     int64            `json:"delayEventId,omitempty"` // delay-apply: the delay it fired
	Messages    []client.Message `json:"messages,omitempty"`
	// Republish says what --republish does with it: publish, delay or
	// skip.
	Republish string `json:"republish"`
	// ID is the message id the republished request carries: the first
	// message's, else one derived from the block's bytes.
	ID string `json:"messageId,omitempty"`
}

func runDiverged(ctx context.Context, g *globals, args []string) int {
	fs := g.flagSet("diverged", divergedUsage)
	republish := fs.Bool("republish", false, "publish the moved messages again to the server")
	create := fs.Bool("create-topics", false, "with --republish: create topics the server does not have")
	noCheck := fs.Bool("no-check", false, "with --republish: do not read the master's binlog for the common prefix and the message ids it holds")
	pos, code, done := parse(fs, args, g, false)
	if done {
		return code
	}
	if err := needArgs(pos, 1, 1, "DIR"); err != nil {
		return fail(g, err)
	}
	if (*create || *noCheck) && !*republish {
		return fail(g, usagef("--create-topics and --no-check go with --republish"))
	}
	man, blocks, err := readMoved(pos[0], time.Now())
	if err != nil {
		return fail(g, err)
	}
	for _, b := range blocks {
		if g.json {
			writeJSON(g.e.stdout, b)
			continue
		}
		fmt.Fprintf(g.e.stdout, "%d..%d %s %s: %d message(s); republish: %s\n", b.EventID, b.LastEventID, b.Cmd, b.Topic, len(b.Messages), b.Republish)
		for _, m := range b.Messages {
			fmt.Fprintf(g.e.stdout, "  headers %v body %q\n", m.Headers, m.Body)
		}
	}
	if !*republish {
		return exitOK
	}
	c, err := g.dial(ctx)
	if err != nil {
		return fail(g, err)
	}
	defer c.Close()
	var held map[string]bool
	if !*noCheck {
		if held, err = masterIDs(ctx, g, c, man.CommonLastEventID); err != nil {
			return fail(g, err)
		}
	}
	var todo []*movedBlock
	for i := range blocks {
		if b := &blocks[i]; b.Republish != "skip" && len(b.Messages) > 0 {
			todo = append(todo, b)
		}
	}
	known := map[string]bool{}
	sent, sentBlocks, dups := 0, 0, 0
	report := time.Now()
	for k, b := range todo {
		if time.Since(report) >= progressEvery {
			report = time.Now()
			fmt.Fprintf(g.e.stderr, "republish: block %d of %d (eventId %d): %d message(s) republished, %d duplicate block(s) skipped\n",
				k+1, len(todo), b.EventID, sent, dups)
		}
		if b.ID != "" && held[heldKey(b.Topic, b.ID)] {
			dups++
			continue
		}
		if !known[b.Topic] {
			if err := ensureTopic(ctx, g, c, b.Topic, *create); err != nil {
				return fail(g, err)
			}
			known[b.Topic] = true
		}
		msgs := make([]*client.Message, len(b.Messages))
		for i := range b.Messages {
			msgs[i] = &b.Messages[i]
		}
		if _, has := msgs[0].Header(client.MessageIDHeader); !has && b.ID != "" && !g.noIDs {
			// Copied: the listing above showed the block as it was moved.
			m := *msgs[0]
			m.Headers = append(append([]client.Header(nil), m.Headers...), client.Header{Key: client.MessageIDHeader, Value: b.ID})
			msgs[0] = &m
		}
		rctx, cancel := g.ctx(ctx)
		if b.Republish == "delay" {
			err = c.PublishDelay(rctx, b.Topic, time.Until(time.UnixMilli(b.TriggerMs)), msgs...)
		} else {
			err = c.PublishBatch(rctx, b.Topic, msgs)
		}
		cancel()
		if err != nil {
			return fail(g, fmt.Errorf("republish block %d (%s %s): %w (%d messages republished before it)", b.EventID, b.Cmd, b.Topic, err, sent))
		}
		sent += len(msgs)
		sentBlocks++
	}
	if g.json {
		writeJSON(g.e.stdout, map[string]any{"republished": sent, "blocks": sentBlocks, "duplicates": dups, "checked": !*noCheck})
	} else {
		fmt.Fprintf(g.e.stdout, "republished %d message(s) in %d block(s); %d block(s) skipped as already on the master\n", sent, sentBlocks, dups)
	}
	return exitOK
}

// progressEvery is how often a long republish or check reports progress.
const progressEvery = 2 * time.Second

func heldKey(topic, id string) string { return topic + "\x00" + id }

// masterIDs reads the master's binlog after commonLast, through the
// replica stream, up to the last eventId its status reports, and returns
// the message ids of the pub, delay and delay-apply requests it holds
// there (heldKey). It fails when the master does not hold the common
// prefix: its binlog ends before commonLast, or commonLast is not where a
// block of its ends.
func masterIDs(ctx context.Context, g *globals, c *client.Client, commonLast int64) (map[string]bool, error) {
	rctx, cancel := g.ctx(ctx)
	stream, err := c.OpenReplica(rctx, commonLast)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("check the master's binlog: %w (--no-check republishes without it)", err)
	}
	defer stream.Close()
	last, err := masterLast(ctx, g, c.Master())
	if err != nil {
		return nil, fmt.Errorf("check the master's binlog: %w (--no-check republishes without it)", err)
	}
	if last < commonLast {
		return nil, fmt.Errorf("the master %s does not hold the common prefix of the moved tail: its binlog ends at eventId %d, the prefix at %d; this directory is not from its history (--no-check republishes anyway)",
			c.Master(), last, commonLast)
	}
	held := map[string]bool{}
	at, report := commonLast, time.Now()
	for at < last {
		if time.Since(report) >= progressEvery {
			report = time.Now()
			fmt.Fprintf(g.e.stderr, "check: read the master's binlog up to eventId %d of %d\n", at, last)
		}
		rctx, cancel := g.ctx(ctx)
		blk, err := stream.Next(rctx)
		cancel()
		if err != nil {
			if at == commonLast && client.IsServerError(err) {
				return nil, fmt.Errorf("the master %s does not hold the common prefix of the moved tail (up to eventId %d): %w; this directory is not from its history, or the master no longer retains it (--no-check republishes anyway)",
					c.Master(), commonLast, err)
			}
			return nil, fmt.Errorf("check the master's binlog after eventId %d: %w", at, err)
		}
		_, blast, _, err := binlog.DecodeSpan(blk.Raw)
		if err != nil {
			return nil, fmt.Errorf("check the master's binlog: block %d: %w", blk.EventID, err)
		}
		at = blast
		msgs, err := blockMessages(blk.Block)
		if err != nil {
			return nil, fmt.Errorf("check the master's binlog: block %d: %w", blk.EventID, err)
		}
		for _, m := range msgs {
			if id, ok := m.Header(client.MessageIDHeader); ok {
				held[heldKey(string(blk.Topic), id)] = true
			}
		}
	}
	return held, nil
}

// masterLast asks the server at addr its last eventId.
func masterLast(ctx context.Context, g *globals, addr string) (int64, error) {
	sec, err := g.clientOptions()
	if err != nil {
		return 0, err
	}
	rctx, cancel := g.ctx(ctx)
	defer cancel()
	c, err := client.Dial(rctx, addr, client.Options{MaxConns: 1, DialTimeout: g.timeout, HealthCheckInterval: -1,
		TLS: sec.TLS, Credentials: sec.Credentials})
	if err != nil {
		return 0, err
	}
	defer c.Close()
	st, err := c.Status(rctx)
	if err != nil {
		return 0, err
	}
	return st.LastEventID, nil
}

func ensureTopic(ctx context.Context, g *globals, c *client.Client, topic string, create bool) error {
	rctx, cancel := g.ctx(ctx)
	defer cancel()
	_, err := c.TopicInfo(rctx, topic)
	if err == nil {
		return nil
	}
	if !errors.Is(err, client.ErrTopicNotExist) {
		return err
	}
	if !create {
		return fmt.Errorf("topic %q: %w (create it first, or use --create-topics)", topic, err)
	}
	return c.CreateTopic(rctx, topic)
}

// readMoved decodes the moved binlog blocks of a rejoin directory and
// decides what republishing does with each (now: for delays).
func readMoved(dir string, now time.Time) (*movedManifest, []movedBlock, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		return nil, nil, fmt.Errorf("read the rejoin manifest: %w", err)
	}
	var man movedManifest
	if err := json.Unmarshal(raw, &man); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", filepath.Join(dir, "manifest.json"), err)
	}
	var out []movedBlock
	applied := map[int64]bool{} // delay eventIds whose apply was moved
	for _, f := range man.BinlogFiles {
		path := filepath.Join(dir, f.Path)
		buf, err := os.ReadFile(path)
		if err != nil {
			return nil, nil, err
		}
		for off := 0; off < len(buf); {
			blk, last, n, err := binlog.DecodeSpan(buf[off:])
			if err != nil {
				return nil, nil, fmt.Errorf("%s at offset %d: %w", path, off, err)
			}
			rawBlock := buf[off : off+n]
			off += n
			mb := movedBlock{EventID: blk.EventID, LastEventID: last, Cmd: binlog.CmdName(blk.Cmd), Topic: string(blk.Topic), Republish: "skip"}
			switch blk.Cmd {
			case binlog.CmdPub:
				mb.Republish = "publish"
			case binlog.CmdDelay, binlog.CmdDelayApply:
				mb.TriggerMs = int64(binary.LittleEndian.Uint64(blk.Payload))
				if blk.Cmd == binlog.CmdDelay {
					mb.Republish = "delay"
					if time.UnixMilli(mb.TriggerMs).Sub(now) < time.Second {
						mb.Republish = "publish"
					}
				} else {
					mb.DelayID = int64(binary.LittleEndian.Uint64(blk.Payload[8:]))
					applied[mb.DelayID] = true
					if mb.DelayID > man.CommonLastEventID {
						mb.Republish = "publish"
					}
				}
			}
			if mb.Messages, err = blockMessages(blk); err != nil {
				return nil, nil, fmt.Errorf("%s: block %d: %w", path, blk.EventID, err)
			}
			if mb.Topic == protocol.CursorTopic || mb.Topic == protocol.QueueTopic {
				// Stored consumer positions and queue-group state of the old
				// history: the master keeps its own.
				mb.Republish = "skip"
			}
			if len(mb.Messages) > 0 {
				if id, ok := mb.Messages[0].Header(client.MessageIDHeader); ok {
					mb.ID = id
				} else {
					sum := sha256.Sum256(rawBlock)
					mb.ID = hex.EncodeToString(sum[:16])
				}
			}
			out = append(out, mb)
		}
	}
	// A delay whose apply was moved too is republished by its apply.
	for i := range out {
		if out[i].Cmd == "delay" && applied[out[i].EventID] {
			out[i].Republish = "skip"
		}
	}
	return &man, out, nil
}

// blockMessages decodes the messages of a pub, delay or delay-apply block
// (none for the other commands).
func blockMessages(blk binlog.Block) ([]client.Message, error) {
	records := blk.Payload
	switch blk.Cmd {
	case binlog.CmdPub:
	case binlog.CmdDelay, binlog.CmdDelayApply:
		if len(records) < binlog.DelayPrefixLen {
			return nil, fmt.Errorf("%s block of %d bytes", binlog.CmdName(blk.Cmd), len(records))
		}
		records = records[binlog.DelayPrefixLen:]
	default:
		return nil, nil
	}
	var out []client.Message
	for len(records) > 0 {
		rec, rn, err := protocol.ParseRecord(records)
		if err != nil {
			return nil, err
		}
		m := client.Message{Body: append([]byte(nil), rec.Body...)}
		for _, kv := range rec.Headers {
			m.Headers = append(m.Headers, client.Header{Key: kv.Key, Value: kv.Value})
		}
		out = append(out, m)
		records = records[rn:]
	}
	return out, nil
}
