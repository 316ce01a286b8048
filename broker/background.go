package broker

import (
	"context"
	"time"

	"github.com/smssmq/smss/meta"
)

// What the background jobs of the same process read from the meta store:
// the delay scheduler (delay/), the expiry reaper (lifecycle/) and the
// value-log collection (cmd/smss). Their changes go through the writer
// (ApplyDelay, ExpireTopic) like every other.

// ScanDelays reads one page of the delay queue from the first entry due
// at or after fromMs: the entries due by nowMs, at most limit of them, and
// the time of the next one (meta.Store.ScanDelays).
func (b *Broker) ScanDelays(fromMs, nowMs int64, limit int) (meta.DelayPage, error) {
	return b.meta.ScanDelays(fromMs, nowMs, limit)
}

// ExpiredTopics returns the names of the topics whose lifetime ended at or
// before nowMs, in expiry order.
func (b *Broker) ExpiredTopics(nowMs int64) ([]string, error) {
	return b.meta.ExpiredTopics(nowMs)
}

// StoredTopic returns topic name's entry as the meta store holds it
// (ok=false when it holds none): the expiry a reaper's delete is
// conditioned on.
func (b *Broker) StoredTopic(name string) (meta.Topic, bool, error) {
	return b.meta.Topic(name)
}

// NextExpiry returns the earliest expireAt of any topic with a lifetime,
// ok=false when there is none.
func (b *Broker) NextExpiry() (int64, bool, error) {
	return b.meta.NextExpiry()
}

// RunMetaGC reclaims the meta store's value-log space every interval until
// ctx is done or the broker is closed.
func (b *Broker) RunMetaGC(ctx context.Context, interval time.Duration) {
	b.meta.RunGC(ctx, interval)
}
