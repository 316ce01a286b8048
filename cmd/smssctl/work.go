package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/smssmq/smss/client"
)

const workUsage = `usage: smssctl work TOPIC GROUP [--exec CMD] [--count N] [--consumer NAME]

Consumes the queue group GROUP of TOPIC (smssctl queue create) as one
competing consumer: every message goes to one of the group's consumers.
Without --exec each message is printed (eventId, attempt, headers, body; one
JSON object per line with --json) and acked. With --exec each message runs
CMD through "sh -c", with the body on stdin and SMSS_EVENT_ID, SMSS_TOPIC,
SMSS_GROUP, SMSS_ATTEMPT (1 on the first delivery) and SMSS_CONSUMER in the
environment: exit status 0 acks the message, any other naks it (it is
delivered again after the group's backoff, to this or another consumer, and
dead-lettered after the group's max deliveries). The command's output goes
to smssctl's. Stops on Ctrl-C (a running CMD gets SIGTERM, and its exit
status still counts) or after --count acked messages; the messages acked
and how many of those the server confirmed are printed to stderr at the
end. Reconnects (with backoff) when the stream is lost, to the master among
the --addr addresses; a work that cannot start (nothing listens, TLS or
login refused, on every address) ends at once with exit code 1. Exit code
3: the group or its topic was deleted.
`

func runWork(ctx context.Context, g *globals, args []string) int {
	fs := g.flagSet("work", workUsage)
	execCmd := fs.String("exec", "", "run this shell command per message (body on stdin); exit 0 acks, other naks")
	count := fs.Int("count", 0, "exit after this many acked messages (0: run until stopped)")
	consumer := fs.String("consumer", "", "consumer name in the group's info (default: host, pid and a random suffix)")
	pos, code, done := parse(fs, args, g, false)
	if done {
		return code
	}
	switch err := needArgs(pos, 2, 2, "TOPIC GROUP"); {
	case err != nil:
		return fail(g, err)
	case *count < 0:
		return fail(g, usagef("--count must be >= 0"))
	}
	topic, group := pos[0], pos[1]
	dialer, err := g.dialer()
	if err != nil {
		return fail(g, err)
	}
	// As for sub: the worker retries for ever, which suits a stream that
	// was running; one that never started ends with the error once every
	// address failed.
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
	var acked, confirmed atomic.Int64
	// Set once the worker is made: --exec's environment names its consumer.
	var handler client.QueueHandler
	w, err := client.NewWorker("", client.WorkerConfig{
		Addrs: g.addrs(), Topic: topic, Group: group, Consumer: *consumer,
		DialTimeout: g.timeout, DialContext: first.dial, Logger: subLogger(g, &first.connected),
		OnConfirm: func(c client.QueueConfirm) {
			if c.Op == client.QueueOpAck && c.Result == client.QueueResultDone {
				confirmed.Add(1)
			}
		},
		Handler: func(ctx context.Context, m *client.QueueMessage) error {
			err := handler(ctx, m)
			if err == nil && acked.Add(1) == int64(*count) {
				// The worker hands out no more messages once its context
				// ended; this ack still goes out, and is confirmed before
				// Run returns.
				cancelRun(nil)
			}
			return err
		},
	})
	if err != nil {
		return fail(g, usagef("%v", err))
	}
	handler = func(_ context.Context, m *client.QueueMessage) error {
		printQueueMessage(g, m)
		return nil
	}
	if *execCmd != "" {
		handler = execHandler(g, *execCmd, "SMSS_CONSUMER="+w.Consumer())
	}
	err = w.Run(runCtx)
	if cause := context.Cause(runCtx); errors.Is(err, context.Canceled) && cause != nil && !errors.Is(cause, context.Canceled) {
		return fail(g, fmt.Errorf("work on %s group %s: %w", topic, group, cause))
	}
	if first.connected.Load() && !g.json {
		fmt.Fprintf(g.e.stderr, "smssctl: %d messages acked, %d confirmed by the server\n", acked.Load(), confirmed.Load())
	}
	switch {
	case err == nil, errors.Is(err, context.Canceled):
		return exitOK
	case errors.Is(err, client.ErrQueueDeleted):
		return report(g, fmt.Sprintf("work ended: queue group %s of topic %s was deleted", group, topic), exitTopicDeleted)
	}
	return fail(g, noQueues(g, err))
}

// execHandler runs cmdline per message; extraEnv is added to the
// environment.
func execHandler(g *globals, cmdline string, extraEnv ...string) client.QueueHandler {
	return func(ctx context.Context, m *client.QueueMessage) error {
		cmd := exec.CommandContext(ctx, "sh", "-c", cmdline)
		// A stop asks the command to finish rather than killing it, so
		// that work it completes is still acked; it is killed if it has
		// not exited a few seconds later.
		cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
		cmd.WaitDelay = 5 * time.Second
		cmd.Stdin = bytes.NewReader(m.Body)
		cmd.Stdout, cmd.Stderr = g.e.stdout, g.e.stderr
		cmd.Env = append(os.Environ(), "SMSS_EVENT_ID="+itoa(m.EventID), "SMSS_TOPIC="+m.Topic,
			"SMSS_GROUP="+m.Group, "SMSS_ATTEMPT="+strconv.Itoa(m.Attempt))
		cmd.Env = append(cmd.Env, extraEnv...)
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(g.e.stderr, "smssctl: eventId %d (attempt %d): %s: %v; nak\n", m.EventID, m.Attempt, cmdline, err)
			return err
		}
		return nil
	}
}

// jsonQueueMessage is the --json form of a message of smssctl work.
type jsonQueueMessage struct {
	EventID    int64           `json:"eventId"`
	Attempt    int             `json:"attempt"`
	Topic      string          `json:"topic"`
	Group      string          `json:"group"`
	Time       string          `json:"time"`
	Ts         int64           `json:"ts"`
	Headers    []client.Header `json:"headers"`
	Body       *string         `json:"body,omitempty"`
	BodyBase64 *string         `json:"bodyBase64,omitempty"`
}

func printQueueMessage(g *globals, m *client.QueueMessage) {
	if g.json {
		j := jsonQueueMessage{EventID: m.EventID, Attempt: m.Attempt, Topic: m.Topic, Group: m.Group,
			Time: m.Time.UTC().Format(time.RFC3339Nano), Ts: m.Time.UnixMilli(), Headers: m.Headers}
		if j.Headers == nil {
			j.Headers = []client.Header{}
		}
		if utf8.Valid(m.Body) {
			s := string(m.Body)
			j.Body = &s
		} else {
			s := base64.StdEncoding.EncodeToString(m.Body)
			j.BodyBase64 = &s
		}
		b, _ := json.Marshal(j)
		fmt.Fprintf(g.e.stdout, "%s\n", b)
		return
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d\tattempt %d\t", m.EventID, m.Attempt)
	for i, h := range m.Headers {
		if i > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString(printable(h.Key) + "=" + printable(h.Value))
	}
	sb.WriteByte('\t')
	sb.WriteString(printable(string(m.Body)))
	fmt.Fprintln(g.e.stdout, sb.String())
}
