package broker

import (
	"errors"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/smssmq/smss/broker/msgcount"
	"github.com/smssmq/smss/metrics"
	"github.com/smssmq/smss/segment"
	"github.com/smssmq/smss/topicblock"
)

// The operator views of this file (metrics.Source, apart from what only the
// process knows: version, listen address, a slave's link) are read once a
// second by the admin sampler and by every scrape. None of them waits for
// the writer: they read the logs' committed positions and files, and cache
// what cannot change (the sizes of complete files, the figures of a log
// whose committed end did not move).

// statsState is the Broker's bookkeeping for the operator views.
type statsState struct {
	// fatal is the error that stopped the writer, nil while it runs.
	fatal atomic.Pointer[error]

	subsMu sync.Mutex // a leaf (lock order: doc.go)
	subs   map[*Subscription]struct{}

	cacheMu sync.Mutex // before Broker.mu (lock order: doc.go)
	topics  map[string]*topicFigures
	binlog  fileSizes

	counts msgcount.Counts // message counts (topiccount.go, package msgcount)

	delayMu   sync.Mutex // a leaf (lock order: doc.go)
	delayAt   time.Time
	delayTook time.Duration
	delays    metrics.DelayStats
	delayErr  error
}

func (st *statsState) addSub(s *Subscription) {
	st.subsMu.Lock()
	if st.subs == nil {
		st.subs = map[*Subscription]struct{}{}
	}
	st.subs[s] = struct{}{}
	st.subsMu.Unlock()
}

func (st *statsState) removeSub(s *Subscription) {
	st.subsMu.Lock()
	delete(st.subs, s)
	st.subsMu.Unlock()
}

// FatalError returns the error that stopped the writer, nil while it runs
// (readiness probes; Fatal delivers the same error once).
func (b *Broker) FatalError() error {
	if p := b.stats.fatal.Load(); p != nil {
		return *p
	}
	return nil
}

// fileSizes caches the sizes of a log's complete files, which never change
// until retention removes them.
type fileSizes map[int64]int64

// measure returns the bytes of l's committed data and its number of files.
// Files past the committed one hold nothing readers may see yet.
func (fs *fileSizes) measure(l *segment.Log) (int64, int, error) {
	if *fs == nil {
		*fs = fileSizes{}
	}
	files, committed := l.Files(), l.Committed()
	var total int64
	n := 0
	for _, id := range files {
		switch {
		case id == committed.FileID:
			total += committed.Offset
		case id < committed.FileID:
			size, ok := (*fs)[id]
			if !ok {
				st, err := os.Stat(l.Path(id))
				if errors.Is(err, os.ErrNotExist) {
					continue // removed by retention since Files
				}
				if err != nil {
					return 0, 0, err
				}
				size = st.Size()
				(*fs)[id] = size
			}
			total += size
		default:
			continue
		}
		n++
	}
	for id := range *fs {
		if len(files) == 0 || id < files[0] {
			delete(*fs, id)
		}
	}
	return total, n, nil
}

// topicFigures are the cached on-disk figures of one topic incarnation.
type topicFigures struct {
	t         *topic
	log       *segment.Log // nil: read from a private view, t.log was not open
	committed segment.Position
	oldest    int64
	sizes     fileSizes
	stats     metrics.TopicStats
}

// TopicStats returns the on-disk figures of topic name (metrics.Source):
// the bytes and count of its committed log files, the number of messages
// in them, its first and last eventIds and the time of its newest message.
// Messages is -1 until a background count of the files from before this
// process (or written before the count existed) is done (package msgcount).
func (b *Broker) TopicStats(name string) (metrics.TopicStats, bool) {
	b.mu.RLock()
	t := b.topics[name]
	var l *segment.Log
	if t != nil {
		l = t.log
	}
	b.mu.RUnlock()
	if t == nil {
		return metrics.TopicStats{}, false
	}
	return b.topicFigures(t, l), true
}

func (b *Broker) topicFigures(t *topic, l *segment.Log) metrics.TopicStats {
	st := b.diskFigures(t, l)
	// Not cached with the rest: it changes when a background count ends.
	st.Messages = b.stats.counts.Messages(t, l)
	if st.Messages < 0 && st.Bytes == 0 {
		st.Messages = 0 // a new topic's log, not opened yet: nothing to count
	}
	return st
}

func (b *Broker) diskFigures(t *topic, l *segment.Log) metrics.TopicStats {
	b.stats.cacheMu.Lock()
	defer b.stats.cacheMu.Unlock()
	if b.stats.topics == nil {
		b.stats.topics = map[string]*topicFigures{}
	}
	f := b.stats.topics[t.meta.Name]
	if f == nil || f.t != t {
		f = &topicFigures{t: t, committed: segment.Position{FileID: -1}}
		b.stats.topics[t.meta.Name] = f
		b.pruneFigures()
	}
	if l == nil {
		// Nothing is appended to a topic before the writer opens its log,
		// so figures read while it was closed stay true until then.
		if f.log == nil && f.committed.FileID != -1 {
			return f.stats
		}
		f.log = nil
		f.sizes = nil
		f.committed, f.stats = b.closedTopicFigures(t)
		return f.stats
	}
	committed, files := l.Committed(), l.Files()
	oldest := int64(-1)
	if len(files) > 0 {
		oldest = files[0]
	}
	if f.log == l && f.committed == committed && f.oldest == oldest {
		return f.stats
	}
	if f.log != l {
		f.sizes = nil
	}
	f.log, f.committed, f.oldest = l, committed, oldest
	f.stats = logFigures(l, &f.sizes)
	return f.stats
}

// pruneFigures forgets deleted topics once the cache has grown past the
// live topics (cacheMu held).
func (b *Broker) pruneFigures() {
	b.mu.RLock()
	live := len(b.topics)
	b.mu.RUnlock()
	if len(b.stats.topics) <= 2*live+16 {
		return
	}
	b.mu.RLock()
	for name, f := range b.stats.topics {
		if b.topics[name] != f.t {
			delete(b.stats.topics, name)
		}
	}
	b.mu.RUnlock()
}

// closedTopicFigures reads the figures of a topic whose log this process
// has not opened, through a read-only view of its directory (the view
// appends nothing, so it cannot disturb the writer's own Log).
func (b *Broker) closedTopicFigures(t *topic) (segment.Position, metrics.TopicStats) {
	unknown := metrics.TopicStats{Bytes: -1, Files: -1, Messages: -1, FirstEventID: -1, LastEventID: -1, LastWriteTime: -1}
	// Read-only: the view must neither re-create the directory of a topic
	// that was just deleted (moved to the trash) nor rewrite index files
	// that the writer's own Log, opened meanwhile, may be appending to.
	if _, err := os.Stat(t.dir); err != nil {
		return segment.Position{}, unknown
	}
	l, err := segment.Open(segment.Options{Dir: t.dir, MaxFileSize: b.opts.MaxLogSize, Decode: decodeTopic, Logger: b.log, ReadOnly: true})
	if err != nil {
		return segment.Position{}, unknown
	}
	defer l.Close()
	var sizes fileSizes
	return l.Committed(), logFigures(l, &sizes)
}

// logFigures reads a topic log's figures; a part that cannot be read is
// reported as -1.
func logFigures(l *segment.Log, sizes *fileSizes) metrics.TopicStats {
	st := metrics.TopicStats{Messages: -1}
	var err error
	if st.Bytes, st.Files, err = sizes.measure(l); err != nil {
		st.Bytes, st.Files = -1, -1
	}
	if first, ok, err := l.FirstEventID(); err != nil {
		st.FirstEventID = -1
	} else if ok {
		st.FirstEventID = first
	}
	raw, _, err := l.NewestBlock()
	if err != nil {
		st.LastEventID, st.LastWriteTime = -1, -1
		return st
	}
	if raw == nil {
		return st
	}
	blk, _, err := topicblock.DecodeBlock(raw)
	if err != nil {
		st.LastEventID, st.LastWriteTime = -1, -1
		return st
	}
	st.LastEventID, st.LastWriteTime = blk.EventID, blk.SaveTime
	return st
}

// Subscribers lists the live subscriptions (metrics.Source). Position is
// the last eventId acknowledged (the start eventId before the first ack);
// Lag is the topic's last eventId minus Position, counted from just before
// the oldest retained message when Position is older than that, so a
// subscriber that starts from 0 does not report every eventId ever
// assigned.
func (b *Broker) Subscribers() []metrics.SubscriberInfo {
	b.stats.subsMu.Lock()
	subs := make([]*Subscription, 0, len(b.stats.subs))
	for s := range b.stats.subs {
		subs = append(subs, s)
	}
	b.stats.subsMu.Unlock()
	out := make([]metrics.SubscriberInfo, 0, len(subs))
	for _, s := range subs {
		in := metrics.SubscriberInfo{Topic: s.t.meta.Name, Who: s.who, Since: s.since, StartEventID: s.start,
			Delivered: s.delivered.Load(), Position: s.acked.Load()}
		if r := s.remote.Load(); r != nil {
			in.RemoteAddr = *r
		}
		b.mu.RLock()
		l, live := s.t.log, b.topics[in.Topic] == s.t
		b.mu.RUnlock()
		if live { // a deleted topic's subscriber is about to get its 255
			fig := b.topicFigures(s.t, l)
			base := in.Position
			if fig.FirstEventID > 0 && base < fig.FirstEventID-1 {
				base = fig.FirstEventID - 1
			}
			in.Lag = max(fig.LastEventID-base, 0)
		}
		out = append(out, in)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Who < out[j].Who
	})
	return out
}

// Replication describes this broker's replication (metrics.Source). On a
// master it lists the replica streams being served; on a slave it names
// the role only: the link to the master belongs to the replication
// package, and the process adds it (cmd/smss).
func (b *Broker) Replication() metrics.ReplicationInfo {
	last := b.LastEventID()
	r := metrics.ReplicationInfo{Role: metrics.RoleMaster, LastEventID: last, Slaves: []metrics.SlaveInfo{},
		ReadCommitted: b.ReadCommitted(), CommitPoint: b.CommitPoint(), HeldByCommit: b.BlockedOnCommit()}
	if b.IsSlave() {
		r.Role = metrics.RoleSlave
	}
	b.replicas.mu.Lock()
	streams := make([]*BinlogStream, 0, len(b.replicas.streams))
	for _, s := range b.replicas.streams {
		streams = append(streams, s)
	}
	b.replicas.mu.Unlock()
	sort.Slice(streams, func(i, j int) bool { return streams[i].id < streams[j].id })
	for _, s := range streams {
		in := metrics.SlaveInfo{Since: s.since, Position: s.sent.Load()}
		if a := s.remote.Load(); a != nil {
			in.RemoteAddr = *a
		}
		in.LagEvents = max(last-in.Position, 0)
		r.Slaves = append(r.Slaves, in)
	}
	return r
}

// minDelayRescan bounds how often Delays walks the delay queue; a walk that
// took long is reused for ten times its duration, so a huge queue costs at
// most a tenth of a core however often it is asked for.
const minDelayRescan = time.Second

// Delays counts the delayed messages not yet applied by due time
// (metrics.Source), from a key-only walk of the delay queue.
func (b *Broker) Delays() metrics.DelayStats {
	b.stats.delayMu.Lock()
	defer b.stats.delayMu.Unlock()
	st := &b.stats
	if st.delayAt.IsZero() || time.Since(st.delayAt) >= max(minDelayRescan, 10*st.delayTook) {
		start := time.Now()
		now := b.opts.Now()
		d := metrics.NewDelayStats()
		err := b.meta.DelayTriggers(func(trigger int64) { d.Add(now, trigger) })
		st.delayAt, st.delayTook, st.delayErr = time.Now(), time.Since(start), err
		if err != nil {
			b.log.Warn("count delayed messages", "err", err)
		} else {
			st.delays = d
		}
	}
	d := st.delays
	if d.Buckets == nil {
		d = metrics.NewDelayStats()
	}
	d.Buckets = append([]metrics.DelayBucket(nil), d.Buckets...)
	return d
}

// ServerInfo returns what the broker knows of the process (metrics.Source):
// role, data directory, last eventId and the binlog's size. The caller adds
// version, listen address, start time and configuration.
func (b *Broker) ServerInfo() metrics.ServerInfo {
	in := metrics.ServerInfo{Role: metrics.RoleMaster, DataDir: b.opts.Dir, LastEventID: b.LastEventID(), Epoch: b.Epoch(), DedupeIDs: b.DedupeIDs()}
	if b.IsSlave() {
		in.Role = metrics.RoleSlave
	}
	b.stats.cacheMu.Lock()
	bytes, files, err := b.stats.binlog.measure(b.binlog)
	b.stats.cacheMu.Unlock()
	if err != nil {
		bytes, files = -1, -1
	}
	in.BinlogBytes, in.BinlogFiles = bytes, files
	return in
}

var _ metrics.Source = (*Broker)(nil)
