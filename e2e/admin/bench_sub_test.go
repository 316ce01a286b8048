package admin

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/smssmq/smss/broker"
	"github.com/smssmq/smss/e2e/internal/kit"
	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/server"
)

// benchServer starts the real binary for a benchmark: console logging with
// no sampled lines, default store settings.
func benchServer(b *testing.B, extra string) *kit.Proc {
	b.Helper()
	dir := b.TempDir()
	cfg := fmt.Sprintf("host: 127.0.0.1\nport: 0\nlog:\n  path: stdout\n  sample: 0\nstore:\n  path: %s\n%s",
		filepath.Join(dir, "data"), extra)
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(cfg), 0o644); err != nil {
		b.Fatal(err)
	}
	return kit.StartArgs(b, dir)
}

// benchSubscriber is a lean subscriber: it reads frames into one reused
// buffer and looks only at what it needs.
type benchSubscriber struct {
	c   net.Conn
	r   *bufio.Reader
	buf []byte
	h   protocol.RespHeader
	a   [2]byte
}

func newBenchSubscriber(b *testing.B, addr string) *benchSubscriber {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return &benchSubscriber{c: c, r: bufio.NewReaderSize(c, 256<<10)}
}

func (s *benchSubscriber) subscribe(topic, who string, after int64, batch uint8) error {
	_, err := s.c.Write(kit.Must(protocol.AppendSub(nil, []byte(topic), nil, after, batch, 10*time.Second, []byte(who))))
	return err
}

// frame reads one unit; for a data frame it returns the count and the
// message area (valid until the next call). Alives return count 0.
func (s *benchSubscriber) frame() (int, []byte, error) {
	h := &s.h
	for {
		if _, err := io.ReadFull(s.r, h[:]); err != nil {
			return 0, nil, err
		}
		switch h.Code() {
		case protocol.StatusAlive:
			continue
		case protocol.StatusOK:
		default:
			return 0, nil, fmt.Errorf("unit %d in the stream", h.Code())
		}
		n := int(h.FrameLen())
		if cap(s.buf) < n {
			s.buf = make([]byte, n)
		}
		s.buf = s.buf[:n]
		if _, err := io.ReadFull(s.r, s.buf); err != nil {
			return 0, nil, err
		}
		return int(h.FrameCount()), s.buf, nil
	}
}

func (s *benchSubscriber) ack(code uint16) error {
	binary.LittleEndian.PutUint16(s.a[:], code)
	_, err := s.c.Write(s.a[:])
	return err
}

// benchPublish stores n messages with a body of size bytes on topic, in
// requests of perPub records, over a few connections.
func benchPublish(b *testing.B, addr, topic string, n, size, perPub int) {
	b.Helper()
	rec := kit.Record(nil, string(make([]byte, size)))
	var batch []byte
	for range perPub {
		batch = append(batch, rec...)
	}
	req := kit.Must(protocol.AppendPub(nil, []byte(topic), nil, batch))
	const conns = 4
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for g := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			r := bufio.NewReader(c)
			for i := g; i < n/perPub; i += conns {
				if _, err := c.Write(req); err != nil {
					errs <- err
					return
				}
				if _, err := protocol.ReadReply(r, protocol.ReplyPlain, 0); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// BenchmarkConsume: one subscriber reads 1,000,000 stored 200-byte
// messages; an op is one message. Run with -benchtime=1000000x for batch
// 255 (a larger N wraps around and reads the topic again).
func BenchmarkConsume(b *testing.B) {
	const stored = 1_000_000
	p := benchServer(b, "")
	c := kit.Dial(b, p.Addr)
	if err := c.Create("bench", 0); err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	benchPublish(b, p.Addr, "bench", stored, 200, 100)
	b.Logf("published %d messages in %v", stored, time.Since(t0))

	for _, batch := range []uint8{255, 10, 1} {
		b.Run(fmt.Sprintf("batch%d", batch), func(b *testing.B) {
			s := newBenchSubscriber(b, p.Addr)
			b.ResetTimer()
			start := time.Now()
			got, inRound, last := 0, 0, int64(0)
			if err := s.subscribe("bench", "consumer", 0, batch); err != nil {
				b.Fatal(err)
			}
			for got < b.N {
				n, area, err := s.frame()
				if err != nil {
					b.Fatalf("after %d messages: %v", got, err)
				}
				// Cheap sanity: the first id of each frame follows the last.
				if id := int64(binary.LittleEndian.Uint64(area[8:])); id <= last {
					b.Fatalf("eventId %d after %d", id, last)
				} else {
					last = id
				}
				got += n
				inRound += n
				code := uint16(0)
				if got >= b.N || inRound == stored {
					code = 1
				}
				if err := s.ack(code); err != nil {
					b.Fatal(err)
				}
				if code == 1 && got < b.N {
					// Read the topic again from the start.
					inRound, last = 0, 0
					if err := s.subscribe("bench", "consumer", 0, batch); err != nil {
						b.Fatal(err)
					}
				}
			}
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(got)/elapsed.Seconds(), "msg/s")
			// Make sure the stream ended cleanly before the next run.
			if err := (&kit.Client{C: s.c, R: s.r}).InSync(); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkDeliveryLatency: a live subscriber, messages published at
// 1,000 msg/s; reports the time from just before the pub request is written
// to the arrival of the frame carrying it. An op is one message.
func BenchmarkDeliveryLatency(b *testing.B) {
	p := benchServer(b, "")
	c := kit.Dial(b, p.Addr)
	runs := 0
	b.Run("1000msg/s", func(b *testing.B) {
		// A fresh topic per run: the subscriber sees only this run's
		// messages.
		runs++
		topic := fmt.Sprint("lat", runs)
		if err := c.Create(topic, 0); err != nil {
			b.Fatal(err)
		}
		s := newBenchSubscriber(b, p.Addr)
		if err := s.subscribe(topic, "w", 0, 1); err != nil {
			b.Fatal(err)
		}
		lat := make([]time.Duration, 0, b.N)
		done := make(chan error, 1)
		go func() {
			done <- func() error {
				for len(lat) < b.N {
					n, area, err := s.frame()
					now := time.Now()
					if err != nil {
						return err
					}
					off := 0
					for range n {
						size := int(binary.LittleEndian.Uint32(area[off+32:]))
						sentAt := int64(binary.LittleEndian.Uint64(area[off+40:]))
						lat = append(lat, now.Sub(time.Unix(0, sentAt)))
						off += 40 + size
					}
					code := uint16(0)
					if len(lat) >= b.N {
						code = 1
					}
					if err := s.ack(code); err != nil {
						return err
					}
				}
				return nil
			}()
		}()
		pubc := kit.Dial(b, p.Addr)
		body := make([]byte, 200)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		// The pub round trip, for comparison: delivery cannot beat the
		// commit that precedes it.
		rtt := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for range b.N {
			<-tick.C
			t0 := time.Now()
			binary.LittleEndian.PutUint64(body, uint64(t0.UnixNano()))
			if err := pubc.Pub(topic, kit.Record(nil, string(body))); err != nil {
				b.Fatal(err)
			}
			rtt = append(rtt, time.Since(t0))
		}
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		b.ReportMetric(quantileUs(lat, 0.50), "p50-µs")
		b.ReportMetric(quantileUs(lat, 0.99), "p99-µs")
		b.ReportMetric(quantileUs(lat, 1), "max-µs")
		b.ReportMetric(quantileUs(rtt, 0.50), "pub-rtt-p50-µs")
		b.ReportMetric(quantileUs(rtt, 0.99), "pub-rtt-p99-µs")
	})
}

// quantileUs sorts d and returns its q quantile in microseconds.
func quantileUs(d []time.Duration, q float64) float64 {
	slices.Sort(d)
	return float64(d[min(len(d)-1, int(q*float64(len(d))))].Microseconds())
}

// inProcessBackend adapts the broker to server.Backend, as cmd/smss does.
type inProcessBackend struct{ *broker.Broker }

func (b inProcessBackend) Subscribe(topic, who []byte, after int64) (server.Subscription, error) {
	s, err := b.Broker.Subscribe(topic, who, after)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// inProcessServer runs broker and server inside the test process, so that
// go test -cpuprofile sees the server's side too. It returns the address.
func inProcessServer(b *testing.B) string {
	b.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	br, err := broker.Open(broker.Options{Dir: filepath.Join(b.TempDir(), "data"), FlushLevel: 1, Logger: logger})
	if err != nil {
		b.Fatal(err)
	}
	srv, err := server.New(server.Options{Backend: inProcessBackend{br}, Logger: logger})
	if err != nil {
		b.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		b.Fatal(err)
	}
	go srv.Serve()
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		br.Close()
	})
	return srv.Addr().String()
}

// BenchmarkConsumeInProcess is BenchmarkConsume (batch 255 and 1, 200,000
// stored messages) with the server in the test process, for profiling:
//
//	go test -run X -bench ConsumeInProcess -cpuprofile cpu.out ./e2e/admin
func BenchmarkConsumeInProcess(b *testing.B) {
	const stored = 200_000
	addr := inProcessServer(b)
	c := kit.Dial(b, addr)
	if err := c.Create("bench", 0); err != nil {
		b.Fatal(err)
	}
	benchPublish(b, addr, "bench", stored, 200, 100)
	for _, batch := range []uint8{255, 1} {
		b.Run(fmt.Sprintf("batch%d", batch), func(b *testing.B) {
			s := newBenchSubscriber(b, addr)
			b.ResetTimer()
			start := time.Now()
			got, inRound := 0, 0
			if err := s.subscribe("bench", "consumer", 0, batch); err != nil {
				b.Fatal(err)
			}
			for got < b.N {
				n, _, err := s.frame()
				if err != nil {
					b.Fatalf("after %d messages: %v", got, err)
				}
				got += n
				inRound += n
				code := uint16(0)
				if got >= b.N || inRound == stored {
					code = 1
				}
				if err := s.ack(code); err != nil {
					b.Fatal(err)
				}
				if code == 1 && got < b.N {
					inRound = 0
					if err := s.subscribe("bench", "consumer", 0, batch); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(got)/time.Since(start).Seconds(), "msg/s")
			b.StopTimer()
			if err := (&kit.Client{C: s.c, R: s.r}).InSync(); err != nil {
				b.Fatal(err)
			}
		})
	}
}
