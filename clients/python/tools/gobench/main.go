// Command gobench measures the Go client's publish throughput the way
// clients/python/tools/bench.py measures the Python client's: C goroutines
// share one client.Client, each publishing one message per request (with a
// message id, the default) as fast as the server answers, for -duration.
//
//	go run ./clients/python/tools/gobench -addr 127.0.0.1:12301 -conns 16
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/smssmq/smss/client"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:12301", "server host:port")
	topic := flag.String("topic", "gobench", "topic (created if missing)")
	conns := flag.Int("conns", 1, "publishing goroutines (one pooled connection each)")
	duration := flag.Duration("duration", 10*time.Second, "length of the run")
	size := flag.Int("size", 128, "message body bytes")
	flag.Parse()
	if err := run(*addr, *topic, *conns, *duration, *size); err != nil {
		fmt.Fprintln(os.Stderr, "gobench:", err)
		os.Exit(1)
	}
}

func run(addr, topic string, conns int, d time.Duration, size int) error {
	if conns < 1 || size < 1 {
		return errors.New("-conns and -size must be positive")
	}
	ctx := context.Background()
	c, err := client.Dial(ctx, addr, client.Options{MaxConns: max(16, conns)})
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.CreateTopic(ctx, topic); err != nil && !errors.Is(err, client.ErrTopicExist) {
		return err
	}
	body := make([]byte, size)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	lat := make([][]time.Duration, conns)
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	start := time.Now()
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				t0 := time.Now()
				if t0.After(stop) {
					return
				}
				if err := c.Publish(ctx, topic, client.NewMessage(body)); err != nil {
					errs <- err
					return
				}
				lat[i] = append(lat[i], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	slices.Sort(all)
	pct := func(p float64) float64 {
		return float64(all[min(len(all)-1, int(p*float64(len(all))))]) / 1e6
	}
	fmt.Printf("conns=%d size=%d msgs=%d elapsed=%.1fs rate=%.0f msg/s p50=%.2fms p99=%.2fms\n",
		conns, size, len(all), el.Seconds(), float64(len(all))/el.Seconds(), pct(0.5), pct(0.99))
	return nil
}
