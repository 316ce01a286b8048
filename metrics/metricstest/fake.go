// Package metricstest provides Fake, an in-memory metrics.Source for tests
// and demos of the admin server and the collectors.
package metricstest

import (
	"errors"
	"sync"

	"github.com/smssmq/smss/metrics"
	"github.com/smssmq/smss/protocol"
)

// ErrTopics is what Topics returns while Fake.FailTopics is set.
var ErrTopics = errors.New("metricstest: topics unavailable")

// Fake is a metrics.Source whose answers are set through Update. It is safe
// for concurrent use; every getter returns copies.
type Fake struct {
	mu    sync.Mutex
	state State
}

// State is everything a Fake answers.
type State struct {
	Topics      []protocol.TopicInfo
	Stats       map[string]metrics.TopicStats
	Subscribers []metrics.SubscriberInfo
	Replication metrics.ReplicationInfo
	Delays      metrics.DelayStats
	Info        metrics.ServerInfo
	Cursors     []metrics.CursorInfo
	// FailTopics makes Topics return ErrTopics.
	FailTopics bool
}

// NewFake returns a Fake answering s.
func NewFake(s State) *Fake { return &Fake{state: s} }

// Update changes the state under the Fake's lock.
func (f *Fake) Update(fn func(*State)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(&f.state)
}

// Topics implements metrics.Source.
func (f *Fake) Topics() ([]protocol.TopicInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.state.FailTopics {
		return nil, ErrTopics
	}
	return append([]protocol.TopicInfo(nil), f.state.Topics...), nil
}

// TopicStats implements metrics.Source.
func (f *Fake) TopicStats(name string) (metrics.TopicStats, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.state.Stats[name]
	return s, ok
}

// Subscribers implements metrics.Source.
func (f *Fake) Subscribers() []metrics.SubscriberInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]metrics.SubscriberInfo(nil), f.state.Subscribers...)
}

// Cursors implements metrics.CursorSource.
func (f *Fake) Cursors() []metrics.CursorInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]metrics.CursorInfo(nil), f.state.Cursors...)
}

// Replication implements metrics.Source.
func (f *Fake) Replication() metrics.ReplicationInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.state.Replication
	r.Slaves = append([]metrics.SlaveInfo(nil), r.Slaves...)
	if r.Master != nil {
		m := *r.Master
		r.Master = &m
	}
	return r
}

// Delays implements metrics.Source.
func (f *Fake) Delays() metrics.DelayStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	d := f.state.Delays
	d.Buckets = append([]metrics.DelayBucket(nil), d.Buckets...)
	return d
}

// ServerInfo implements metrics.Source.
func (f *Fake) ServerInfo() metrics.ServerInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := f.state.Info
	if i.Config != nil {
		c := make(map[string]any, len(i.Config))
		for k, v := range i.Config {
			c[k] = v
		}
		i.Config = c
	}
	i.Certificates = append([]metrics.CertificateInfo(nil), i.Certificates...)
	return i
}

var _ metrics.Source = (*Fake)(nil)
