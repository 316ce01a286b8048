// Command qworker is one competing consumer of a queue group for the
// end-to-end tests: a client.Worker that prints one line per event on
// standard output, unbuffered, so that a test that SIGKILLs it still reads
// everything it did:
//
//	got EVENTID ATTEMPT UNIXMS BODY     a message was handed to the handler
//	acked EVENTID UNIXMS                the server confirmed its ack (done)
//	gone EVENTID UNIXMS                 an outcome found it no longer pending
//
// A body starting with "poison" is nak'd every time; any other is acked
// after -work.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/smssmq/smss/client"
)

func main() {
	addrs := flag.String("addrs", "", "comma-separated server addresses")
	topic := flag.String("topic", "", "topic")
	group := flag.String("group", "", "queue group")
	name := flag.String("name", "", "consumer name")
	work := flag.Duration("work", 2*time.Millisecond, "time spent on each message")
	conc := flag.Int("concurrency", 4, "handlers at once")
	flag.Parse()
	var mu sync.Mutex
	line := func(format string, args ...any) {
		mu.Lock()
		fmt.Fprintf(os.Stdout, format+"\n", args...)
		mu.Unlock()
	}
	as := strings.Split(*addrs, ",")
	w, err := client.NewWorker(as[0], client.WorkerConfig{
		Topic: *topic, Group: *group, Consumer: *name, Concurrency: *conc, Addrs: as[1:],
		MinBackoff: 100 * time.Millisecond, MaxBackoff: 500 * time.Millisecond, ProbeTimeout: 500 * time.Millisecond,
		Handler: func(ctx context.Context, m *client.QueueMessage) error {
			line("got %d %d %d %s", m.EventID, m.Attempt, time.Now().UnixMilli(), m.Body)
			if strings.HasPrefix(string(m.Body), "poison") {
				return errors.New("poison")
			}
			time.Sleep(*work)
			return nil
		},
		OnConfirm: func(c client.QueueConfirm) {
			switch {
			case c.Result == client.QueueResultGone:
				line("gone %d %d", c.EventID, time.Now().UnixMilli())
			case c.Op == client.QueueOpAck:
				line("acked %d %d", c.EventID, time.Now().UnixMilli())
			}
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	line("ready")
	err = w.Run(ctx)
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
