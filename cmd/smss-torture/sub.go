package main

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/smssmq/smss/protocol"
)

// subMsg is one message a subscriber received.
type subMsg struct {
	id  int64
	rec []byte
}

// subscriber consumes a permanent topic from its start, acking every
// frame, and resubscribes after its last message whenever the stream
// breaks (a killed server, a timeout). It therefore must see every message
// of the topic exactly once, in order.
type subscriber struct {
	name, topic, who string
	addr             func() string

	mu       sync.Mutex
	got      []subMsg
	last     int64
	err      error // first protocol violation seen
	sessions int
	refusals map[string]int // 400s at subscription start, by text
}

func newSubscriber(name, topic, who string, addr func() string) *subscriber {
	return &subscriber{name: name, topic: topic, who: who, addr: addr, refusals: map[string]int{}}
}

// Refusals a subscription start may legitimately get while servers restart:
// the previous session's slot not yet freed, a slave that has not caught
// up with the subscriber's position or not yet replicated the topic.
var benignRefusals = []string{"regiester exist", "is beyond the last eventId", "topic not exist"}

func (s *subscriber) fail(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = fmt.Errorf("subscriber %s: %s", s.name, fmt.Sprintf(format, args...))
	}
}

func (s *subscriber) snapshot() ([]subMsg, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.got[:len(s.got):len(s.got)], s.err
}

func (s *subscriber) run(stop <-chan struct{}, rng *rand.Rand) {
	delay := 50 * time.Millisecond
	for {
		select {
		case <-stop:
			return
		default:
		}
		progressed := false
		if addr := s.addr(); addr != "" {
			if w, err := dialWire(addr); err == nil {
				progressed = s.session(w, stop, rng)
				w.close()
			}
		}
		if progressed {
			delay = 50 * time.Millisecond
		} else {
			delay = min(2*delay, 500*time.Millisecond)
		}
		t := time.NewTimer(delay)
		select {
		case <-stop:
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// session runs one subscription; it reports whether it received data.
func (s *subscriber) session(w *wire, stop <-chan struct{}, rng *rand.Rand) bool {
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-stop:
			w.close()
		case <-done:
		}
	}()
	s.mu.Lock()
	after := s.last
	s.sessions++
	s.mu.Unlock()
	batch := uint8(1 + rng.IntN(50))
	req := mustEnc(protocol.AppendSub(nil, []byte(s.topic), nil, after, batch, 5*time.Second, []byte(s.who)))
	w.c.SetWriteDeadline(time.Now().Add(requestTimeout))
	if _, err := w.c.Write(req); err != nil {
		return false
	}
	got := false
	for {
		// Alives come every second; 5 s of silence means a dead server.
		w.c.SetReadDeadline(time.Now().Add(5 * time.Second))
		f, err := protocol.ReadSubFrame(w.r, maxReply)
		if err != nil {
			var be *protocol.BizError
			if errors.As(err, &be) {
				s.refused(be.Msg, got)
			}
			return got
		}
		switch f.Code {
		case protocol.StatusAlive:
			continue
		case protocol.StatusSubEnd:
			s.fail("sub end (255) on permanent topic %s", s.topic)
			return got
		}
		msgs, err := protocol.ParseSubMessages(f.Body, f.Count)
		if err != nil {
			s.fail("bad data frame: %v", err)
			return got
		}
		s.mu.Lock()
		for _, m := range msgs {
			if m.EventID <= s.last && s.err == nil {
				s.err = fmt.Errorf("subscriber %s: eventId %d after %d", s.name, m.EventID, s.last)
			}
			s.got = append(s.got, subMsg{id: m.EventID, rec: bytes.Clone(m.Raw)})
			s.last = m.EventID
		}
		s.mu.Unlock()
		got = true
		w.c.SetWriteDeadline(time.Now().Add(requestTimeout))
		if _, err := w.c.Write([]byte{0, 0}); err != nil {
			return got
		}
	}
}

func (s *subscriber) refused(msg string, midStream bool) {
	benign := !midStream
	for _, b := range benignRefusals {
		if benign && strings.Contains(msg, b) {
			s.mu.Lock()
			s.refusals[b]++
			s.mu.Unlock()
			return
		}
	}
	s.fail("400 %q (mid-stream %v)", msg, midStream)
}
