package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/client"
)

const subUsage = `usage: smssctl sub TOPIC --who NAME [--from N [--epoch E:S] | --resume [--new-from N|end]] [--batch N] [--count N]

Subscribes as NAME and prints every message as it arrives, one per line,
reconnecting (with backoff) if the connection drops once the subscription
has started. A subscription that cannot start (nothing listens, TLS or
login refused, on every address) ends at once with exit code 1. --from is the last
eventId already consumed (0: from the oldest message). Stops on Ctrl-C,
after --count messages, or when the topic is deleted (exit code 3). The last
acknowledged eventId is printed to stderr at the end, to resume with --from;
when --count ends inside a batch, that batch is not acknowledged, so
resuming prints its first messages again rather than skip any.
--resume starts after the position the server stored for (TOPIC, NAME)
(every ack moves it), so nothing needs to be remembered; a NAME without one
starts per --new-from: 0 the oldest message (default), end after the last
one, or N after eventId N.
--epoch E:S is the epoch the server placed --from in and where that epoch
began there, as the line printed at the end gives them: on a node whose
history parts from that one (a failover dropped messages already taken, and
the new master numbered its own writes over them) the subscription resumes
where the histories part, says so, and prints the new history's messages
instead of skipping them.
`

// parseEpochFlag parses --epoch E:S.
func parseEpochFlag(v string) (uint64, int64, error) {
	es, ss, ok := strings.Cut(v, ":")
	e, err1 := strconv.ParseUint(es, 10, 64)
	st, err2 := strconv.ParseInt(ss, 10, 64)
	if !ok || err1 != nil || err2 != nil || st < 0 {
		return 0, 0, usagef("--epoch must be EPOCH:START (two numbers, as the end of a subscription prints them), not %q", v)
	}
	return e, st, nil
}

func runSub(ctx context.Context, g *globals, args []string) int {
	fs := g.flagSet("sub", subUsage)
	who := fs.String("who", "", "subscriber name (required)")
	from := fs.Int64("from", 0, "last eventId already consumed")
	batch := fs.Int("batch", 16, "messages per batch, 1..255")
	count := fs.Int("count", 0, "exit after this many messages (0: run until stopped)")
	resume := fs.Bool("resume", false, "start after the server's stored position of (TOPIC, --who)")
	newFrom := fs.String("new-from", "0", "with --resume, where a who without a position starts: 0, end or an eventId")
	epochFlag := fs.String("epoch", "", "with --from: EPOCH:START of that position, to check it against the node's history")
	var ackTimeout durationFlag
	fs.Var(&ackTimeout, "ack-timeout", "how long the server waits for each ack (default: the server's)")
	pos, code, done := parse(fs, args, g, false)
	if done {
		return code
	}
	switch err := needArgs(pos, 1, 1, "topic"); {
	case err != nil:
		return fail(g, err)
	case *who == "":
		return fail(g, usagef("--who is required"))
	case *batch < 1 || *batch > 255:
		return fail(g, usagef("--batch must be 1..255"))
	case *from < 0:
		return fail(g, usagef("--from must be >= 0"))
	case *count < 0:
		return fail(g, usagef("--count must be >= 0"))
	case *resume && *from != 0:
		return fail(g, usagef("--from and --resume exclude each other"))
	case *epochFlag != "" && *resume:
		return fail(g, usagef("--epoch goes with --from, not --resume"))
	}
	var fromPos *client.Position
	if *epochFlag != "" {
		e, st, err := parseEpochFlag(*epochFlag)
		if err != nil {
			return fail(g, err)
		}
		fromPos = &client.Position{EventID: *from, Epoch: e, Start: st}
	}
	resumeNew := client.ResumeFromEnd
	if *newFrom != "end" {
		v, err := strconv.ParseInt(*newFrom, 10, 64)
		if err != nil || v < 0 {
			return fail(g, usagef("--new-from must be 0, end or an eventId"))
		}
		resumeNew = v
	}
	printed := 0
	dialer, err := g.dialer()
	if err != nil {
		return fail(g, err)
	}
	// The subscriber retries for ever, which suits a subscription that
	// was running; one that never started (nothing listens, TLS or login
	// refused) ends with the error once every address failed.
	first := newFirstConnect(dialer, len(g.addrs()))
	runCtx, cancelRun := context.WithCancelCause(ctx)
	defer cancelRun(nil)
	go func() {
		select {
		case err := <-first.failed:
			cancelRun(err)
		case <-runCtx.Done():
		}
	}()
	sub, err := client.NewSubscriber("", client.SubscriberConfig{
		Addrs: g.addrs(), Topic: pos[0], Who: *who, From: *from, BatchSize: uint8(*batch), AckTimeout: ackTimeout.d,
		Resume: *resume, ResumeNew: resumeNew, FromPosition: fromPos,
		OnHistoryChange: func(ch client.HistoryChange) {
			fmt.Fprintf(g.e.stderr, "smssctl: %s does not hold the history eventId %d was taken in (epoch %d); resuming after %d, where they part\n",
				ch.Addr, ch.LastAcked.EventID, ch.LastAcked.Epoch, ch.ResumeAfter)
		},
		DialTimeout: g.timeout, DialContext: first.dial,
		Logger: subLogger(g, &first.connected),
		Handler: func(_ context.Context, msgs []client.Delivery) client.AckAction {
			for i := range msgs {
				printDelivery(g, &msgs[i])
				printed++
				if *count > 0 && printed >= *count {
					if i == len(msgs)-1 {
						return client.AckAndStop
					}
					// Never acknowledge messages that were not printed.
					return client.StopWithoutAck
				}
			}
			return client.Ack
		},
	})
	if err != nil {
		return fail(g, err)
	}
	err = sub.Run(runCtx)
	if cause := context.Cause(runCtx); errors.Is(err, context.Canceled) && cause != nil && !errors.Is(cause, context.Canceled) {
		return fail(g, fmt.Errorf("subscribe to %s: %w", pos[0], cause))
	}
	if first.connected.Load() {
		if p, ok := sub.Position(); ok && p.EventID == sub.LastAcked() {
			fmt.Fprintf(g.e.stderr, "smssctl: last acknowledged eventId %d (resume with --from %d --epoch %d:%d)\n", p.EventID, p.EventID, p.Epoch, p.Start)
		} else {
			fmt.Fprintf(g.e.stderr, "smssctl: last acknowledged eventId %d (resume with --from %d)\n", sub.LastAcked(), sub.LastAcked())
		}
	}
	switch {
	case err == nil, errors.Is(err, context.Canceled):
		return exitOK
	case errors.Is(err, client.ErrTopicDeleted):
		return report(g, fmt.Sprintf("subscription ended: topic %s was deleted", pos[0]), exitTopicDeleted)
	}
	return fail(g, err)
}

// firstConnect wraps a subscriber's dialer to tell a subscription that
// never started from one that lost its connection. A subscription counts
// as started once its connection delivered a byte (a message or an
// alive): a TCP connect alone is not enough, since a TLS listener accepts
// a plain client and then closes. failed receives the error once every
// address failed before any subscription started.
type firstConnect struct {
	base      client.DialFunc
	addrs     int
	connected atomic.Bool
	mu        sync.Mutex
	failures  map[string]bool
	failed    chan error
}

func newFirstConnect(base client.DialFunc, addrs int) *firstConnect {
	if base == nil {
		base = (&net.Dialer{}).DialContext
	}
	return &firstConnect{base: base, addrs: max(addrs, 1), failures: map[string]bool{}, failed: make(chan error, 1)}
}

func (f *firstConnect) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := f.base(ctx, network, addr)
	if err != nil {
		if ctx.Err() == nil {
			f.fail(addr, err)
		}
		return nil, err
	}
	if f.connected.Load() {
		return c, nil
	}
	return &watchConn{Conn: c, f: f, addr: addr}, nil
}

func (f *firstConnect) fail(addr string, err error) {
	if f.connected.Load() {
		return
	}
	f.mu.Lock()
	f.failures[addr] = true
	all := len(f.failures) >= f.addrs
	f.mu.Unlock()
	if all {
		select {
		case f.failed <- err:
		default:
		}
	}
}

// watchConn marks the subscription started at its first byte read, and
// reports a connection that ended before any.
type watchConn struct {
	net.Conn
	f    *firstConnect
	addr string
	got  bool
}

func (w *watchConn) Read(p []byte) (int, error) {
	n, err := w.Conn.Read(p)
	if n > 0 && !w.got {
		w.got = true
		w.f.connected.Store(true)
	}
	if err != nil && !w.got {
		w.f.fail(w.addr, err)
	}
	return n, err
}

// subLogger is the subscriber's logger: warnings on stderr, as JSON with
// --json, from the moment the subscription started.
func subLogger(g *globals, started *atomic.Bool) *slog.Logger {
	opts := &slog.HandlerOptions{Level: slog.LevelWarn}
	var h slog.Handler = slog.NewTextHandler(g.e.stderr, opts)
	if g.json {
		h = slog.NewJSONHandler(g.e.stderr, opts)
	}
	return slog.New(quietUntil{h, started})
}

// quietUntil drops log records until started reports true: the
// subscriber's "reconnecting" warnings mean nothing to the user of a
// subscription that never started (its error is printed instead).
type quietUntil struct {
	slog.Handler
	started *atomic.Bool
}

func (q quietUntil) Enabled(ctx context.Context, l slog.Level) bool {
	return q.started.Load() && q.Handler.Enabled(ctx, l)
}

func (q quietUntil) WithAttrs(as []slog.Attr) slog.Handler {
	return quietUntil{q.Handler.WithAttrs(as), q.started}
}

func (q quietUntil) WithGroup(name string) slog.Handler {
	return quietUntil{q.Handler.WithGroup(name), q.started}
}

// jsonMessage is the --json form of a delivered message.
type jsonMessage struct {
	EventID    int64           `json:"eventId"`
	Time       string          `json:"time"`
	Ts         int64           `json:"ts"`
	Headers    []client.Header `json:"headers"`
	Body       *string         `json:"body,omitempty"`
	BodyBase64 *string         `json:"bodyBase64,omitempty"`
}

func printDelivery(g *globals, d *client.Delivery) {
	if g.json {
		m := jsonMessage{EventID: d.EventID, Time: d.Time.UTC().Format(time.RFC3339Nano), Ts: d.Time.UnixMilli(), Headers: d.Headers}
		if m.Headers == nil {
			m.Headers = []client.Header{}
		}
		if utf8.Valid(d.Body) {
			s := string(d.Body)
			m.Body = &s
		} else {
			s := base64.StdEncoding.EncodeToString(d.Body)
			m.BodyBase64 = &s
		}
		b, _ := json.Marshal(m)
		fmt.Fprintf(g.e.stdout, "%s\n", b)
		return
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d\t%s\t", d.EventID, d.Time.Local().Format("2006-01-02 15:04:05.000"))
	for i, h := range d.Headers {
		if i > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString(printable(h.Key) + "=" + printable(h.Value))
	}
	sb.WriteByte('\t')
	sb.WriteString(printable(string(d.Body)))
	fmt.Fprintln(g.e.stdout, sb.String())
}

// printable keeps one message on one line: text with control bytes or
// invalid UTF-8 is shown Go-quoted.
func printable(s string) string {
	if !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return strconv.Quote(s)
	}
	return s
}

const replicaUsage = `usage: smssctl replica [--from N] [--count N]

Reads the master's replication stream and prints each binlog block's
command line (writeTime, cmd, eventId, timestamp, topic, payloadLen, tab
separated). --from is the last eventId already seen (0: from the oldest
block). Stops on Ctrl-C or after --count blocks.
`

func runReplica(ctx context.Context, g *globals, args []string) int {
	fs := g.flagSet("replica", replicaUsage)
	from := fs.Int64("from", 0, "last eventId already seen")
	count := fs.Int("count", 0, "exit after this many blocks (0: run until stopped)")
	pos, code, done := parse(fs, args, g, false)
	if done {
		return code
	}
	if err := needArgs(pos, 0, 0, ""); err != nil {
		return fail(g, err)
	}
	if *from < 0 || *count < 0 {
		return fail(g, usagef("--from and --count must be >= 0"))
	}
	c, err := g.dial(ctx)
	if err != nil {
		return fail(g, err)
	}
	defer c.Close()
	octx, cancel := g.ctx(ctx)
	rs, err := c.OpenReplica(octx, *from)
	cancel()
	if err != nil {
		return fail(g, err)
	}
	defer rs.Close()
	for n := 0; *count == 0 || n < *count; n++ {
		b, err := rs.Next(ctx)
		if err != nil {
			if errors.Is(err, context.Canceled) {
				return exitOK
			}
			return fail(g, err)
		}
		printBlock(g, &b)
	}
	return exitOK
}

var cmdNames = map[uint8]string{binlog.CmdPub: "pub", binlog.CmdCreate: "create", binlog.CmdDelete: "delete",
	binlog.CmdDelay: "delay", binlog.CmdDelayApply: "delayApply"}

func printBlock(g *globals, b *client.ReplicaBlock) {
	if g.json {
		n, _ := b.MessageCount()
		payloadLen := 0
		if len(b.Payload) > 0 {
			payloadLen = len(b.Payload) + 1
		}
		out, _ := json.Marshal(map[string]any{"writeTime": b.WriteTime, "cmd": b.Cmd, "cmdName": cmdNames[b.Cmd],
			"eventId": b.EventID, "timestamp": b.Timestamp, "topic": string(b.Topic), "payloadLen": payloadLen,
			"messages": n})
		fmt.Fprintf(g.e.stdout, "%s\n", out)
		return
	}
	// The command line as stored, without its '\n' (§5.3).
	ll := int(binary.LittleEndian.Uint32(b.Raw))
	line := b.Raw[4 : 4+ll]
	fmt.Fprintf(g.e.stdout, "%s\n", bytes.TrimSuffix(line, []byte("\n")))
}
