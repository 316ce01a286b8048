package server

import (
	"context"
	"errors"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/smssmq/smss/meta"
	"github.com/smssmq/smss/protocol"
)

const fakeNow = 1795950274737

// fakeBackend is an in-memory Backend. Hooks let tests make a publish block,
// fail or panic.
type fakeBackend struct {
	mu      sync.Mutex
	topics  map[string]meta.Topic
	records map[string][]byte
	counts  map[string]int
	nextID  int64
	slave   atomic.Bool

	// onPublish, when set, runs before a publish is applied; a non-nil
	// error is returned to the server instead.
	onPublish func(topic string) error
}

func newFakeBackend() *fakeBackend {
	return &fakeBackend{topics: map[string]meta.Topic{}, records: map[string][]byte{}, counts: map[string]int{}, nextID: 1}
}

func (b *fakeBackend) Publish(_ context.Context, topic, records []byte, count int) (int64, error) {
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
	b.records[string(topic)] = append(b.records[string(topic)], records...)
	b.counts[string(topic)] += count
	return id, nil
}

func (b *fakeBackend) CreateTopic(_ context.Context, topic []byte, expireAt int64) (int64, error) {
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
	b.topics[name] = meta.Topic{Name: name, CreateTime: fakeNow, ExpireAt: expireAt, CreateEventID: id,
		StateChangeTime: fakeNow, StateChangeEventID: id, TopicRoot: "/3/3/" + name}
	return id, nil
}

func (b *fakeBackend) DeleteTopic(_ context.Context, topic []byte) (int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.topics[string(topic)]; !ok {
		return 0, protocol.ErrTopicNotExist
	}
	delete(b.topics, string(topic))
	id := b.nextID
	b.nextID++
	return id, nil
}

func (b *fakeBackend) Topic(name []byte) (meta.Topic, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.topics[string(name)]
	if !ok {
		return meta.Topic{}, protocol.ErrTopicNotExist
	}
	return t, nil
}

func (b *fakeBackend) Topics() ([]meta.Topic, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]meta.Topic, 0, len(b.topics))
	for _, t := range b.topics {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (b *fakeBackend) ValidTopics(eventID int64) ([]meta.Topic, error) {
	all, _ := b.Topics()
	var out []meta.Topic
	for _, t := range all {
		if eventID == 0 || t.CreateEventID <= eventID {
			out = append(out, t)
		}
	}
	return out, nil
}

func (b *fakeBackend) IsSlave() bool { return b.slave.Load() }
