package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The JetStream side (issue 36) uses the official Go client, nats.go, and
// its jetstream package: JetStream's protocol is NATS plus JSON API
// subjects and reply inboxes, and no one runs it without that client. Its
// cost lands in the benchmark's own process (client CPU %), which the smss
// side's hand-written wire code keeps as small as it can.

// Ack policies of the JetStream pull consumer (--js-ack).
const (
	jsAckNone     = "none"
	jsAckExplicit = "explicit"
)

// jsSys runs the workloads on one JetStream stream with one subject,
// file storage. Publishers are synchronous JetStream publishes (one in
// flight per connection, like the smss side); a request of N records is N
// asynchronous publishes followed by a wait for all N acks (JetStream has
// no multi-message publish, so that is not like for like with one smss
// request of N records). Consumers are pull consumers.
type jsSys struct {
	urls     []string // urls[0] is where the stream's clients connect (its leader in a cluster)
	stream   string
	subject  string
	replicas int
	// syncAlways: the servers run with sync_interval: always (fsync before
	// the PubAck); otherwise JetStream's default of 2 minutes.
	syncAlways bool
	ack        string // jsAckNone or jsAckExplicit
	live       bool   // e2e: consumers iterate Messages() instead of fetching stored batches
	seq        int
}

func (s *jsSys) name() string { return "jetstream" }

func (s *jsSys) durability() string {
	if s.syncAlways {
		return "sync_interval always (fsync before the PubAck)"
	}
	return "sync_interval 2m default (PubAck before fsync)"
}

func (s *jsSys) copies() string {
	if s.replicas > 1 {
		return fmt.Sprintf("R%d: a PubAck means a quorum of %d of %d servers stored it (not fsynced unless sync_interval always)",
			s.replicas, s.replicas/2+1, s.replicas)
	}
	return ""
}

func jsConnect(url string) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(url, nats.NoReconnect(), nats.Timeout(dialTimeout), nats.Name("smss-bench"))
	if err != nil {
		return nil, nil, fmt.Errorf("connect nats %s: %w", url, err)
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(maxRecords))
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("jetstream %s: %w", url, err)
	}
	return nc, js, nil
}

// maxRecords is the most records one request may carry (--records).
const maxRecords = 10000

// jsAPITimeout bounds one JetStream API call (create stream, consumer).
const jsAPITimeout = 10 * time.Second

// prepare (re)creates the stream empty.
func (s *jsSys) prepare() error {
	nc, js, err := jsConnect(s.urls[0])
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), jsAPITimeout)
	defer cancel()
	if err := js.DeleteStream(ctx, s.stream); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("delete stream %s: %w", s.stream, err)
	}
	// A cluster's meta leader answers (waitJetStream) before it has seen
	// every peer online; until it has, an R3 stream is refused with "no
	// suitable peers for placement" (10005): ask again until startTimeout.
	deadline := time.Now().Add(startTimeout)
	for {
		cctx, ccancel := context.WithTimeout(context.Background(), jsAPITimeout)
		_, err = js.CreateStream(cctx, jetstream.StreamConfig{Name: s.stream, Subjects: []string{s.subject},
			Storage: jetstream.FileStorage, Replicas: max(s.replicas, 1)})
		ccancel()
		var apiErr *jetstream.APIError
		if err == nil || !errors.As(err, &apiErr) || apiErr.ErrorCode != jsErrCodeNoPeers || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // nothing to wait on in other processes but their answer
	}
	if err != nil {
		return fmt.Errorf("create stream %s: %w", s.stream, err)
	}
	return nil
}

// jsErrCodeNoPeers is JetStream's "no suitable peers for placement"
// (nats.go names no constant for it).
const jsErrCodeNoPeers jetstream.ErrorCode = 10005

type jsPub struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	subject string
	body    []byte
	records int
	futs    []jetstream.PubAckFuture
}

func (s *jsSys) dialPublisher(size, records int) (publisher, error) {
	nc, js, err := jsConnect(s.urls[0])
	if err != nil {
		return nil, err
	}
	return &jsPub{nc: nc, js: js, subject: s.subject, body: body(size), records: records}, nil
}

// jsAckWait bounds the wait for one PubAck.
const jsAckWait = 30 * time.Second

func (p *jsPub) publish(stamp int64) error {
	// nats.go copies the body into its write buffer before Publish and
	// PublishAsync return, so one buffer serves every message.
	binary.LittleEndian.PutUint64(p.body, uint64(stamp))
	if p.records == 1 {
		ctx, cancel := context.WithTimeout(context.Background(), jsAckWait)
		defer cancel()
		_, err := p.js.Publish(ctx, p.subject, p.body)
		return err
	}
	p.futs = p.futs[:0]
	for i := 0; i < p.records; i++ {
		f, err := p.js.PublishAsync(p.subject, p.body)
		if err != nil {
			return err
		}
		p.futs = append(p.futs, f)
	}
	timer := time.NewTimer(jsAckWait)
	defer timer.Stop()
	var first error
	for _, f := range p.futs {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			if first == nil {
				first = err
			}
		case <-timer.C:
			return fmt.Errorf("no PubAck within %s", jsAckWait)
		}
	}
	return first
}

func (p *jsPub) close() error {
	p.nc.Close()
	return nil
}

// jsSub is a pull consumer from the start of the stream. Stored messages
// are fetched in batches of --batch (FetchNoWait: an exhausted stream
// returns 0, as XREAD does); a live consumer (e2e) iterates Messages(),
// which keeps pull requests of --batch outstanding.
type jsSub struct {
	nc       *nats.Conn
	cons     jetstream.Consumer
	batch    int
	explicit bool
	iter     jetstream.MessagesContext
}

func (s *jsSys) dialConsumer(batch int) (consumer, error) {
	nc, js, err := jsConnect(s.urls[0])
	if err != nil {
		return nil, err
	}
	s.seq++
	policy := jetstream.AckNonePolicy
	if s.ack == jsAckExplicit {
		policy = jetstream.AckExplicitPolicy
	}
	ctx, cancel := context.WithTimeout(context.Background(), jsAPITimeout)
	defer cancel()
	cons, err := js.CreateOrUpdateConsumer(ctx, s.stream, jetstream.ConsumerConfig{
		Durable:       fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), s.seq),
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     policy,
	})
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("create consumer on %s: %w", s.stream, err)
	}
	sub := &jsSub{nc: nc, cons: cons, batch: batch, explicit: policy == jetstream.AckExplicitPolicy}
	if s.live {
		sub.iter, err = cons.Messages(jetstream.PullMaxMessages(batch))
		if err != nil {
			nc.Close()
			return nil, fmt.Errorf("consume %s: %w", s.stream, err)
		}
	}
	return sub, nil
}

func (s *jsSub) ack(m jetstream.Msg) error {
	if !s.explicit {
		return nil
	}
	if err := m.Ack(); err != nil {
		return fmt.Errorf("ack: %w", err)
	}
	return nil
}

func (s *jsSub) next(fn func(body []byte)) (int, error) {
	if s.iter != nil {
		m, err := s.iter.Next()
		if err != nil {
			return 0, err
		}
		fn(m.Data())
		return 1, s.ack(m)
	}
	b, err := s.cons.FetchNoWait(s.batch)
	if err != nil {
		return 0, fmt.Errorf("fetch: %w", err)
	}
	n := 0
	for m := range b.Messages() {
		fn(m.Data())
		if err := s.ack(m); err != nil {
			return n, err
		}
		n++
	}
	if err := b.Error(); err != nil && !(n > 0 && errors.Is(err, nats.ErrTimeout)) {
		return n, fmt.Errorf("fetch: %w", err)
	}
	return n, nil
}

func (s *jsSub) close() error {
	if s.iter != nil {
		s.iter.Stop()
	}
	s.nc.Close()
	return nil
}
