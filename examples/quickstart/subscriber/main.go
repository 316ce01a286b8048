// Command subscriber prints the messages of a topic as they arrive, from
// the message after -from on, and saves its progress after every
// acknowledged batch (here: prints it, to pass back as -from).
//
//	go run ./examples/quickstart/subscriber -addr 127.0.0.1:12301 -topic order -who billing
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/smssmq/smss/client"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:12301", "smss server")
	topic := flag.String("topic", "order", "topic to read")
	who := flag.String("who", "billing", "subscriber name")
	from := flag.Int64("from", 0, "last eventId already consumed (0: from the oldest message)")
	count := flag.Int("count", 0, "stop after this many messages (0: until Ctrl-C)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	seen := 0
	s, err := client.NewSubscriber(*addr, client.SubscriberConfig{
		Topic:     *topic,
		Who:       *who,
		From:      *from,
		BatchSize: 16,
		Handler: func(ctx context.Context, batch []client.Delivery) client.AckAction {
			for i, d := range batch {
				typ, _ := d.Header("type")
				fmt.Printf("%d %s %s\n", d.EventID, typ, d.Body)
				seen++
				if *count > 0 && seen >= *count {
					if i == len(batch)-1 {
						return client.AckAndStop
					}
					// The rest of the batch was not handled: do not ack it,
					// it comes again on the next run.
					return client.StopWithoutAck
				}
			}
			return client.Ack
		},
		// Called after the server got the ack: the place to persist progress.
		AfterAck: func(last int64) { fmt.Fprintf(os.Stderr, "progress %d\n", last) },
	})
	if err != nil {
		log.Fatal(err)
	}
	// Run reconnects with backoff and resumes after the last ack.
	err = s.Run(ctx)
	switch {
	case err == nil, errors.Is(err, context.Canceled):
		fmt.Fprintf(os.Stderr, "stopped; resume with -from %d\n", s.LastAcked())
	case errors.Is(err, client.ErrTopicDeleted):
		log.Fatalf("topic %s was deleted", *topic)
	default:
		log.Fatal(err)
	}
}
