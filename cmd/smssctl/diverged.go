package main

// smssctl diverged: read what `smss -rejoin` moved aside (issue 16) and,
// on request, publish those messages again to the current master.

import (
	"context"
	"encoding/binary"
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

const divergedUsage = `usage: smssctl diverged DIR [--republish] [--create-topics]

Lists what "smss -rejoin" moved aside: DIR is <store.path>/diverged/<time>/
(manifest.json and the moved binlog files). One line per moved binlog
block: eventIds, command, topic, messages, and each message's headers and
body (--json: one object per block).

--republish publishes the moved messages again to the server (--addr), in
eventId order, each block as one request: pub and delay-apply blocks as
messages, a delay whose apply was not moved as a delayed message for the
time that remains (at once when due). A delay-apply of a delay stored
before the common prefix is skipped: the master holds that delay and fires
it itself. They get new eventIds. A topic the server does not have is an
error, unless --create-topics creates it (permanent).
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
	// Republish says what --republish does with it.
	Republish string `json:"republish"`
}

func runDiverged(ctx context.Context, g *globals, args []string) int {
	fs := g.flagSet("diverged", divergedUsage)
	republish := fs.Bool("republish", false, "publish the moved messages again to the server")
	create := fs.Bool("create-topics", false, "with --republish: create topics the server does not have")
	pos, code, done := parse(fs, args, g, false)
	if done {
		return code
	}
	if err := needArgs(pos, 1, 1, "DIR"); err != nil {
		return fail(g, err)
	}
	blocks, err := readMoved(pos[0], time.Now())
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
	known := map[string]bool{}
	sent := 0
	for _, b := range blocks {
		if b.Republish == "skip" || len(b.Messages) == 0 {
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
	}
	if g.json {
		writeJSON(g.e.stdout, map[string]any{"republished": sent})
	} else {
		fmt.Fprintf(g.e.stdout, "republished %d message(s)\n", sent)
	}
	return exitOK
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
func readMoved(dir string, now time.Time) ([]movedBlock, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		return nil, fmt.Errorf("read the rejoin manifest: %w", err)
	}
	var man movedManifest
	if err := json.Unmarshal(raw, &man); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "manifest.json"), err)
	}
	var out []movedBlock
	applied := map[int64]bool{} // delay eventIds whose apply was moved
	for _, f := range man.BinlogFiles {
		path := filepath.Join(dir, f.Path)
		buf, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		for off := 0; off < len(buf); {
			blk, last, n, err := binlog.DecodeSpan(buf[off:])
			if err != nil {
				return nil, fmt.Errorf("%s at offset %d: %w", path, off, err)
			}
			off += n
			mb := movedBlock{EventID: blk.EventID, LastEventID: last, Cmd: binlog.CmdName(blk.Cmd), Topic: string(blk.Topic), Republish: "skip"}
			records := blk.Payload
			switch blk.Cmd {
			case binlog.CmdPub:
				mb.Republish = "publish"
			case binlog.CmdDelay, binlog.CmdDelayApply:
				mb.TriggerMs = int64(binary.LittleEndian.Uint64(blk.Payload))
				records = blk.Payload[binlog.DelayPrefixLen:]
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
			default:
				records = nil
			}
			for len(records) > 0 {
				rec, rn, err := protocol.ParseRecord(records)
				if err != nil {
					return nil, fmt.Errorf("%s: block %d: %w", path, blk.EventID, err)
				}
				m := client.Message{Body: append([]byte(nil), rec.Body...)}
				for _, kv := range rec.Headers {
					m.Headers = append(m.Headers, client.Header{Key: kv.Key, Value: kv.Value})
				}
				mb.Messages = append(mb.Messages, m)
				records = records[rn:]
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
	return out, nil
}
