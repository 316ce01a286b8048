package broker

// The broker's side of the message counts (package msgcount): what they
// need to know of the topics. The writer's side is its stage "visible" (pipeline.go).

import (
	"github.com/smssmq/smss/broker/msgcount"
	"github.com/smssmq/smss/segment"
)

// startCounts starts the background message counts (Open, after
// recovery: from then on only the writer appends to topic logs).
func (b *Broker) startCounts() {
	o := b.opts.counts
	o.Logger, o.Decode, o.MaxFileSize = b.log, decodeTopic, b.opts.MaxLogSize
	o.NoWrite = b.ReadOnly() != nil // a read-only start writes no file (readonly.go)
	b.stats.counts.Start(countSource{b}, o)
}

// A topic incarnation is a msgcount.Topic: the counts tell a re-created
// topic from the deleted one by the *topic.
func (t *topic) Name() string               { return t.meta.Name }
func (t *topic) Dir() string                { return t.dir }
func (t *topic) Counter() *msgcount.Counter { return &t.count }

// countSource is the broker as the counts' msgcount.Source.
type countSource struct{ b *Broker }

func (s countSource) Topics() []msgcount.Topic {
	ts := s.b.topicsByName()
	out := make([]msgcount.Topic, len(ts))
	for i, t := range ts {
		out[i] = t
	}
	return out
}

func (s countSource) Log(t msgcount.Topic) *segment.Log {
	s.b.mu.RLock()
	defer s.b.mu.RUnlock()
	return t.(*topic).log
}

// Live: a deleted topic leaves b.topics (removeTopic) before its
// directory is renamed into the trash.
func (s countSource) Live(t msgcount.Topic) bool {
	s.b.mu.RLock()
	defer s.b.mu.RUnlock()
	return s.b.topics[t.Name()] == t.(*topic)
}
