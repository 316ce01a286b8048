// Command workqueue is a pool of competing workers on a queue group: every
// instance creates the topic and the group (the same settings again are
// accepted), then handles messages until interrupted, or with -until until
// the group has finished that many jobs (acked or dead-lettered). A job
// whose body starts with "fail" fails every time: it is retried with the
// group's backoff and goes to the dead-letter topic after -max-deliver
// attempts.
//
//	go run ./examples/workqueue -publish 10 -until 11   # queue 10 jobs (and one that fails), then work
//	go run ./examples/workqueue -until 11               # one more worker, in another terminal
//	go run ./examples/workqueue -dead                # list the dead letters
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/smssmq/smss/client"
	"github.com/smssmq/smss/protocol"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:12301", "smss server (the master)")
	topic := flag.String("topic", "jobs", "topic of the jobs")
	group := flag.String("group", "resize", "queue group")
	name := flag.String("name", "", "this worker's name (default: host, pid and a random suffix)")
	publish := flag.Int("publish", 0, "queue this many jobs, and one that fails, before working")
	maxDeliver := flag.Int("max-deliver", 3, "attempts before a job is dead-lettered")
	until := flag.Int64("until", 0, "exit once the group finished this many jobs (0: run until interrupted)")
	dead := flag.Bool("dead", false, "print the dead letters and exit")
	flag.Parse()

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	c, err := client.Dial(ctx, *addr, client.Options{})
	if err != nil {
		log.Fatalf("connect: %v", err)
	}
	defer c.Close()
	deadTopic := *topic + "-dead"
	if *dead {
		printDead(ctx, c, deadTopic)
		return
	}
	if err := c.CreateTopic(ctx, *topic); err != nil && !errors.Is(err, client.ErrTopicExist) {
		log.Fatalf("create topic: %v", err)
	}
	if _, err := c.CreateQueue(ctx, *topic, client.QueueConfig{Group: *group, AckWaitMs: 5000, MaxDeliver: *maxDeliver,
		BackoffMs: []int64{100, 200}, DeadLetter: deadTopic, From: "oldest"}); err != nil {
		log.Fatalf("create queue group: %v", err)
	}
	for i := 1; i <= *publish; i++ {
		if err := c.Publish(ctx, *topic, client.NewMessage([]byte(fmt.Sprintf("job-%d", i)))); err != nil {
			log.Fatalf("publish: %v", err)
		}
	}
	if *publish > 0 {
		if err := c.Publish(ctx, *topic, client.NewMessage([]byte("fail-bad-input"))); err != nil {
			log.Fatalf("publish: %v", err)
		}
	}

	wctx, stop := context.WithCancel(ctx)
	defer stop()
	if *until > 0 {
		go func() {
			t := time.NewTicker(100 * time.Millisecond)
			defer t.Stop()
			for range t.C {
				qs, err := c.Queues(wctx, *topic, *group)
				if wctx.Err() != nil {
					return
				}
				if err == nil && len(qs) == 1 && qs[0].Acked+qs[0].DeadLettered >= *until {
					stop()
					return
				}
			}
		}()
	}
	err = c.Work(wctx, *topic, *group, client.WorkerConfig{Consumer: *name, Concurrency: 2},
		func(ctx context.Context, m *client.QueueMessage) error {
			body := string(m.Body)
			if strings.HasPrefix(body, "fail") {
				fmt.Printf("failed %s (attempt %d)\n", body, m.Attempt)
				return errors.New("cannot process " + body) // redelivered after the backoff
			}
			fmt.Printf("processed %s (attempt %d)\n", body, m.Attempt)
			return nil // acked
		})
	if err != nil && !errors.Is(err, context.Canceled) {
		log.Fatalf("work: %v", err)
	}
}

// printDead lists the dead-letter topic with the headers the server adds.
func printDead(ctx context.Context, c *client.Client, topic string) {
	s, err := c.NewSubscriber(client.SubscriberConfig{
		Topic: topic, Who: "workqueue-dead", From: 0,
		Handler: func(_ context.Context, batch []client.Delivery) client.AckAction {
			for _, d := range batch {
				h := map[string]string{}
				for _, kv := range d.Headers {
					h[kv.Key] = kv.Value
				}
				fmt.Printf("dead letter %s: from %s/%s eventId %s after %s attempts (%s)\n", d.Body,
					h[protocol.DeadHeaderTopic], h[protocol.DeadHeaderGroup], h[protocol.DeadHeaderEventID],
					h[protocol.DeadHeaderAttempts], h[protocol.DeadHeaderReason])
			}
			return client.AckAndStop
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := s.Run(ctx); err != nil {
		log.Fatalf("read dead letters: %v", err)
	}
}
