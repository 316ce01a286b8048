package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/smssmq/smss/protocol"
)

const fakeNow = 1795950274737

// fakeBackend is an in-memory Backend. Hooks let tests make a publish block,
// fail or panic. Like the broker it checks topic names, the role, a
// create's lifetime and delay.maxDelay, in the same order (the server does
// not).
type fakeBackend struct {
	mu       sync.Mutex
	topics   map[string]protocol.TopicInfo
	records  map[string][]byte
	counts   map[string]int
	msgs     map[string][]fakeMsg     // per topic, for subscribers
	deleted  map[string]chan struct{} // per topic, closed on delete
	changed  chan struct{}            // closed and replaced by every publish
	subs     map[[2]string]*fakeSub   // active subscribers by (topic, who)
	delays   []fakeDelay
	nextID   int64
	slave    atomic.Bool
	subsMade atomic.Int64

	// onPublish, when set, runs before a publish is applied; a non-nil
	// error is returned to the server instead.
	onPublish func(topic string) error
	// nextErr, when set, is returned by a subscriber's Next once it has
	// nothing more to deliver (mimics a removed file or corrupt data).
	nextErr error
	// maxDelay is the broker's delay.maxDelay; zero: 30 days.
	maxDelay time.Duration
}

type fakeMsg struct {
	id  int64
	rec []byte
}

type fakeDelay struct {
	topic   string
	records []byte
	count   int
	delayMs int64
}

func newFakeBackend() *fakeBackend {
	return &fakeBackend{topics: map[string]protocol.TopicInfo{}, records: map[string][]byte{}, counts: map[string]int{},
		msgs: map[string][]fakeMsg{}, deleted: map[string]chan struct{}{}, changed: make(chan struct{}),
		subs: map[[2]string]*fakeSub{}, nextID: 1}
}

func (b *fakeBackend) Publish(_ context.Context, topic, records []byte, count int) (int64, error) {
	if err := protocol.ValidateTopicName(topic); err != nil {
		return 0, err
	}
	if b.IsSlave() {
		return 0, protocol.ErrSlavePub
	}
	if b.onPublish != nil {
		if err := b.onPublish(string(topic)); err != nil {
			return 0, err
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.topics[string(topic)]; !ok {
		return 0, protocol.ErrTopicNotExist
	}
	id := b.nextID
	b.nextID += int64(count)
	// The request's bytes are the connection's reusable buffer: keep a copy,
	// as the broker does by writing them out before it replies.
	records = bytes.Clone(records)
	b.records[string(topic)] = append(b.records[string(topic)], records...)
	b.counts[string(topic)] += count
	for rest, next := records, id; len(rest) > 0; next++ {
		var rec []byte
		rec, rest = protocol.NextRecord(rest)
		b.msgs[string(topic)] = append(b.msgs[string(topic)], fakeMsg{id: next, rec: rec})
	}
	close(b.changed)
	b.changed = make(chan struct{})
	return id, nil
}

func (b *fakeBackend) CreateTopic(_ context.Context, topic []byte, expireAt int64) (int64, error) {
	if err := protocol.ValidateTopicName(topic); err != nil {
		return 0, err
	}
	if b.IsSlave() {
		return 0, protocol.ErrSlaveManage
	}
	if expireAt < 0 || (expireAt > 0 && expireAt-time.Now().UnixMilli() < protocol.MinLifetimeMs) {
		return 0, protocol.ErrExpireTooSoon
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	name := string(topic)
	if name == "diskfull" {
		return 0, errors.New("mkdir data/topic/1/2/diskfull: no space left on device")
	}
	if _, ok := b.topics[name]; ok {
		return 0, protocol.ErrTopicExist
	}
	id := b.nextID
	b.nextID++
	b.topics[name] = protocol.TopicInfo{Name: name, CreateTime: fakeNow, ExpireAt: expireAt, CreateEventID: id,
		StateChangeTime: fakeNow, StateChangeEventID: id, TopicRoot: "/3/3/" + name}
	b.deleted[name] = make(chan struct{})
	delete(b.msgs, name)
	return id, nil
}

func (b *fakeBackend) DeleteTopic(_ context.Context, topic []byte) (int64, error) {
	if b.IsSlave() {
		return 0, protocol.ErrSlaveManage
	}
	if err := b.existingName(topic); err != nil {
		return 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.topics[string(topic)]; !ok {
		return 0, protocol.ErrTopicNotExist
	}
	delete(b.topics, string(topic))
	close(b.deleted[string(topic)])
	delete(b.deleted, string(topic))
	id := b.nextID
	b.nextID++
	return id, nil
}

// existingName is the broker's name rule of commands that reach an
// existing topic: a name the create rule refuses passes only for a topic
// of that name (one an original server created).
func (b *fakeBackend) existingName(name []byte) error {
	strict := protocol.ValidateTopicName(name)
	if strict == nil {
		return nil
	}
	if err := protocol.ValidateExistingTopicName(name); err != nil {
		return err
	}
	b.mu.Lock()
	_, ok := b.topics[string(name)]
	b.mu.Unlock()
	if !ok {
		return strict
	}
	return nil
}

func (b *fakeBackend) Topic(name []byte) (protocol.TopicInfo, error) {
	if err := b.existingName(name); err != nil {
		return protocol.TopicInfo{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.topics[string(name)]
	if !ok {
		return protocol.TopicInfo{}, protocol.ErrTopicNotExist
	}
	return t, nil
}

func (b *fakeBackend) Topics() ([]protocol.TopicInfo, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]protocol.TopicInfo, 0, len(b.topics))
	for _, t := range b.topics {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (b *fakeBackend) ValidTopics(eventID int64) ([]protocol.TopicInfo, error) {
	all, _ := b.Topics()
	var out []protocol.TopicInfo
	for _, t := range all {
		if eventID == 0 || t.CreateEventID <= eventID {
			out = append(out, t)
		}
	}
	return out, nil
}

func (b *fakeBackend) IsSlave() bool { return b.slave.Load() }

func (b *fakeBackend) PublishDelay(_ context.Context, topic, records []byte, count int, delayMs int64) (int64, error) {
	if b.IsSlave() {
		return 0, protocol.ErrSlavePub
	}
	max := b.maxDelay
	if max == 0 {
		max = 30 * 24 * time.Hour
	}
	if delayMs > max.Milliseconds() {
		return 0, protocol.NewBizError(fmt.Sprintf("delay of %d ms exceeds delay.maxDelay %d", delayMs, max.Milliseconds()))
	}
	if err := protocol.ValidateTopicName(topic); err != nil {
		return 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.topics[string(topic)]; !ok {
		return 0, protocol.ErrTopicNotExist
	}
	b.delays = append(b.delays, fakeDelay{topic: string(topic), records: bytes.Clone(records), count: count, delayMs: delayMs})
	id := b.nextID
	b.nextID++
	return id, nil
}

func (b *fakeBackend) Subscribe(topic, who []byte, after int64) (Subscription, error) {
	if err := b.existingName(topic); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.topics[string(topic)]; !ok {
		return nil, protocol.ErrTopicNotExist
	}
	if after >= b.nextID {
		return nil, protocol.NewBizError("eventId beyond the last eventId")
	}
	key := [2]string{string(topic), string(who)}
	if b.subs[key] != nil {
		return nil, protocol.NewBizError(string(who) + " regiester exist")
	}
	s := &fakeSub{b: b, key: key, after: after, deleted: b.deleted[string(topic)]}
	b.subs[key] = s
	b.subsMade.Add(1)
	return s, nil
}

// active reports whether (topic, who) holds a subscriber slot.
func (b *fakeBackend) active(topic, who string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.subs[[2]string{topic, who}] != nil
}

// fakeSub delivers a topic's messages with next file id 0 and next position
// the message's index + 1.
type fakeSub struct {
	b       *fakeBackend
	key     [2]string
	after   int64
	deleted chan struct{}
	closed  bool
}

func (s *fakeSub) Next(ctx context.Context, dst []byte, max int, wait time.Duration) ([]byte, int, error) {
	var timer *time.Timer
	for {
		select {
		case <-s.deleted:
			return dst, 0, protocol.ErrTopicDeleted
		default:
		}
		s.b.mu.Lock()
		n := 0
		for i, m := range s.b.msgs[s.key[0]] {
			if m.id <= s.after {
				continue
			}
			if n == max {
				break
			}
			dst = protocol.AppendSubMessage(dst, fakeNow, m.id, 0, int64(i+1), m.rec)
			s.after = m.id
			n++
		}
		changed, nextErr := s.b.changed, s.b.nextErr
		s.b.mu.Unlock()
		if n > 0 {
			return dst, n, nil
		}
		if nextErr != nil {
			return dst, 0, nextErr
		}
		if timer == nil {
			timer = time.NewTimer(wait)
			defer timer.Stop()
		}
		select {
		case <-changed:
		case <-s.deleted:
			return dst, 0, protocol.ErrTopicDeleted
		case <-timer.C:
			return dst, 0, nil
		case <-ctx.Done():
			return dst, 0, ctx.Err()
		}
	}
}

func (s *fakeSub) Close() {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	if s.closed {
		panic("fakeSub closed twice")
	}
	s.closed = true
	delete(s.b.subs, s.key)
}
