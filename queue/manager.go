package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/smssmq/smss/broker"
	"github.com/smssmq/smss/protocol"
)

// Errors of the queue commands; the Biz ones reach clients verbatim.
var (
	ErrNotActive    = protocol.NewBizError("queue groups are served by the master only; this node is not serving them (a slave, or changing role)")
	ErrGroupGone    = protocol.NewBizError("the queue group was deleted")
	ErrTooManyGroup = protocol.NewBizError("too many queue groups (queue.maxGroups)")
)

// ErrNoGroup builds the refusal for a group that does not exist.
func ErrNoGroup(topic, group string) error {
	return protocol.NewBizError(fmt.Sprintf("no queue group %q on topic %q", group, topic))
}

// Waiter is what a write must wait for before it counts: the slaves'
// confirmations under semi-sync, and the fence of a cluster
// (replication.SyncTracker; nil waits for nothing).
type Waiter interface {
	Wait(ctx context.Context, eventID int64) error
}

// Options configure a Manager. Zero values take the defaults.
type Options struct {
	Broker *broker.Broker
	Sync   Waiter
	Logger *slog.Logger
	// MaxGroups bounds the groups of the server (queue.maxGroups).
	MaxGroups int
	// SnapshotRecords: records written after which __queues is compacted
	// into one snapshot (queue.snapshotRecords).
	SnapshotRecords int
	// SnapshotInterval: a snapshot at least this often while records are
	// written (queue.snapshotInterval), so the topic never holds long
	// stretches of history.
	SnapshotInterval time.Duration
	// FeedWait bounds one wait of a group's topic reader.
	FeedWait time.Duration
	// MaxFrameBytes bounds a queue frame (limit.maxFrameBytes).
	MaxFrameBytes int
	Now           func() time.Time
}

// Defaults.
const (
	DefaultMaxGroups        = 1000
	DefaultSnapshotRecords  = 10000
	DefaultSnapshotInterval = time.Hour
)

// Manager serves the queue groups of a master. It is created once per
// broker and serves while started (Start, after the node became master)
// until Stop.
type Manager struct {
	opts Options
	b    *broker.Broker
	log  *slog.Logger

	mu     sync.Mutex // guards the fields below
	active bool
	groups map[groupKey]*group
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// wmu orders the writes of __queues: a record is written and applied
	// to its group's durable state under it, so a snapshot (written under
	// it too) holds every record before it and none after.
	wmu       sync.Mutex
	sinceSnap int
	lastSnap  time.Time
}

// New returns a Manager that is not serving yet.
func New(opts Options) *Manager {
	if opts.MaxGroups <= 0 {
		opts.MaxGroups = DefaultMaxGroups
	}
	if opts.SnapshotRecords <= 0 {
		opts.SnapshotRecords = DefaultSnapshotRecords
	}
	if opts.SnapshotInterval <= 0 {
		opts.SnapshotInterval = DefaultSnapshotInterval
	}
	if opts.FeedWait <= 0 {
		opts.FeedWait = 5 * time.Second
	}
	if opts.MaxFrameBytes <= 0 {
		opts.MaxFrameBytes = protocol.DefaultMaxFrameBytes
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Manager{opts: opts, b: opts.Broker, log: opts.Logger, groups: map[groupKey]*group{}}
}

func (m *Manager) now() time.Time { return m.opts.Now() }

// Start rebuilds every group from __queues and serves them. The node must
// be the master. Progress is logged; a group whose topic is gone is
// deleted.
func (m *Manager) Start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.active {
		return nil
	}
	if m.b.IsSlave() {
		return ErrNotActive
	}
	start := time.Now()
	f := newFold()
	n := 0
	err := m.b.ReadSystemTopic(broker.QueueTopic, func(id int64, rec []byte) error {
		n++
		body, err := unwrap(rec)
		if err == nil {
			err = f.add(id, body)
		}
		if err != nil && f.bad%1000 == 1 {
			m.log.Warn("ignored a message of "+broker.QueueTopic+" that is not a queue record", "eventId", id, "err", err, "seen", f.bad)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("queue: rebuild from %s: %w", broker.QueueTopic, err)
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.lastSnap = m.now()
	m.sinceSnap = n
	m.active = true
	pending := 0
	for k, st := range f.groups {
		t, err := m.b.Topic([]byte(k.topic))
		if err != nil || t.CreateEventID != st.created {
			m.log.Info("queue group's topic is gone; deleting the group", "topic", k.topic, "group", k.group)
			if err := m.writeRaw(m.ctx, encodeDelete(k)); err != nil {
				m.log.Warn("could not record the deletion of a queue group", "topic", k.topic, "group", k.group, "err", err)
			}
			continue
		}
		g := newGroup(m, st)
		if err := g.start(); err != nil {
			// Kept: the next consumer to join restarts it (group).
			m.log.Error("queue group not started; retried when a consumer joins", "topic", k.topic, "group", k.group, "err", err)
			close(g.quit)
		}
		pending += len(st.pending)
		m.groups[k] = g
	}
	m.log.Info("queue groups serving", "groups", len(m.groups), "pending", pending, "records", n,
		"badRecords", f.bad, "elapsed", time.Since(start))
	m.wg.Add(1)
	go m.snapshotTicker(m.ctx)
	return nil
}

// Stop ends every group (their consumers see ErrNotActive) and waits.
func (m *Manager) Stop() {
	m.mu.Lock()
	if !m.active {
		m.mu.Unlock()
		return
	}
	m.active = false
	m.cancel()
	m.groups = map[groupKey]*group{}
	m.mu.Unlock()
	m.wg.Wait()
}

// Count is how many groups the manager serves (0 while not serving).
func (m *Manager) Count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.active {
		return 0
	}
	return len(m.groups)
}

// Active reports whether the manager serves groups.
func (m *Manager) Active() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.active
}

// group returns the live group of k, restarting it from its durable state
// when its loop ended on a failure (a record that could not be written).
func (m *Manager) group(k groupKey) (*group, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.active {
		return nil, ErrNotActive
	}
	g := m.groups[k]
	if g == nil {
		return nil, ErrNoGroup(k.topic, k.group)
	}
	select {
	case <-g.quit:
	default:
		return g, nil
	}
	g.smu.Lock()
	st := g.st
	g.smu.Unlock()
	ng := newGroup(m, st)
	if err := ng.start(); err != nil {
		close(ng.quit)
		m.groups[k] = ng
		return nil, fmt.Errorf("restart queue group %s of %s: %w", k.group, k.topic, err)
	}
	m.groups[k] = ng
	return ng, nil
}

// Create creates a group on topic, or confirms one with the same
// settings, and returns its info.
func (m *Manager) Create(ctx context.Context, topic string, cfg protocol.QueueConfig) (protocol.QueueInfo, error) {
	if err := cfg.Normalize(); err != nil {
		return protocol.QueueInfo{}, err
	}
	if broker.IsSystemTopic(topic) || (cfg.DeadLetter != "" && broker.IsSystemTopic(cfg.DeadLetter)) {
		return protocol.QueueInfo{}, protocol.NewBizError("queue groups cannot read or dead-letter to the server's system topics")
	}
	if cfg.DeadLetter == topic {
		return protocol.QueueInfo{}, protocol.NewBizError("the dead-letter topic must differ from the group's topic")
	}
	t, err := m.b.Topic([]byte(topic))
	if err != nil {
		return protocol.QueueInfo{}, err
	}
	k := groupKey{topic, cfg.Group}
	m.mu.Lock()
	if !m.active {
		m.mu.Unlock()
		return protocol.QueueInfo{}, ErrNotActive
	}
	if g := m.groups[k]; g != nil {
		m.mu.Unlock()
		g.smu.Lock()
		same := g.st.cfg.Same(&cfg)
		have := g.st.cfg
		g.smu.Unlock()
		if !same {
			return protocol.QueueInfo{}, protocol.NewBizError(fmt.Sprintf("queue group %q on topic %q exists with other settings (%+v); delete it first", cfg.Group, topic, have))
		}
		return m.one(k)
	}
	if len(m.groups) >= m.opts.MaxGroups {
		m.mu.Unlock()
		return protocol.QueueInfo{}, ErrTooManyGroup
	}
	last := m.b.LastEventID()
	after, err := cfg.StartAfter(last)
	if err == nil && after > last {
		err = protocol.NewBizError(fmt.Sprintf("from eventId %d is beyond the last eventId %d of this server", after, last))
	}
	if err != nil {
		m.mu.Unlock()
		return protocol.QueueInfo{}, err
	}
	m.mu.Unlock()
	if cfg.DeadLetter != "" {
		if err := m.ensureTopic(ctx, cfg.DeadLetter); err != nil {
			return protocol.QueueInfo{}, fmt.Errorf("create dead-letter topic %s: %w", cfg.DeadLetter, err)
		}
	}
	rec := &configRec{key: k, created: t.CreateEventID, startAfter: after, cfg: cfg}
	m.mu.Lock()
	if !m.active {
		m.mu.Unlock()
		return protocol.QueueInfo{}, ErrNotActive
	}
	if m.groups[k] != nil {
		m.mu.Unlock()
		return m.Create(ctx, topic, cfg) // created meanwhile: compare again
	}
	// Under mu: no second create of k interleaves with this one.
	err = m.writeRaw(ctx, encodeConfig(rec))
	if err != nil {
		m.mu.Unlock()
		return protocol.QueueInfo{}, err
	}
	g := newGroup(m, newGroupState(rec))
	if err := g.start(); err != nil {
		// Recorded, so kept: the next consumer to join restarts it.
		close(g.quit)
		m.groups[k] = g
		m.mu.Unlock()
		return protocol.QueueInfo{}, err
	}
	m.groups[k] = g
	m.mu.Unlock()
	m.log.Info("queue group created", "topic", topic, "group", cfg.Group, "startAfter", after, "ackWaitMs", cfg.AckWaitMs,
		"maxDeliver", cfg.MaxDeliver, "deadLetter", cfg.DeadLetter)
	return m.one(k)
}

func (m *Manager) one(k groupKey) (protocol.QueueInfo, error) {
	qs, err := m.Info(k.topic, k.group)
	if err != nil {
		return protocol.QueueInfo{}, err
	}
	if len(qs) == 0 {
		return protocol.QueueInfo{}, ErrNoGroup(k.topic, k.group)
	}
	return qs[0], nil
}

// ensureTopic creates topic when it does not exist.
func (m *Manager) ensureTopic(ctx context.Context, topic string) error {
	if _, err := m.b.Topic([]byte(topic)); err == nil {
		return nil
	}
	_, err := m.b.CreateTopic(ctx, []byte(topic), 0)
	if errors.Is(err, protocol.ErrTopicExist) {
		return nil
	}
	return err
}

// Delete deletes a group: its consumers' streams end with 255 and its
// state is forgotten.
func (m *Manager) Delete(ctx context.Context, topic, groupName string) error {
	k := groupKey{topic, groupName}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.active {
		return ErrNotActive
	}
	g := m.groups[k]
	if g == nil {
		return ErrNoGroup(topic, groupName)
	}
	if err := m.writeRaw(ctx, encodeDelete(k)); err != nil {
		return err
	}
	delete(m.groups, k)
	g.post(stopEv{})
	m.log.Info("queue group deleted", "topic", topic, "group", groupName)
	return nil
}

// topicGone deletes g after its topic was deleted.
func (m *Manager) topicGone(g *group) {
	m.mu.Lock()
	if m.groups[g.key] == g {
		delete(m.groups, g.key)
	}
	m.mu.Unlock()
	if err := m.writeRaw(g.ctx, encodeDelete(g.key)); err != nil {
		m.log.Warn("could not record the deletion of a queue group whose topic was deleted", "topic", g.key.topic, "group", g.key.group, "err", err)
		return
	}
	m.log.Info("queue group deleted with its topic", "topic", g.key.topic, "group", g.key.group)
}

// Info describes the groups of topic ("" all) named group ("" all),
// sorted by topic and group.
func (m *Manager) Info(topic, groupName string) ([]protocol.QueueInfo, error) {
	m.mu.Lock()
	if !m.active {
		m.mu.Unlock()
		return nil, ErrNotActive
	}
	var gs []*group
	for k, g := range m.groups {
		if (topic == "" || k.topic == topic) && (groupName == "" || k.group == groupName) {
			gs = append(gs, g)
		}
	}
	m.mu.Unlock()
	out := make([]protocol.QueueInfo, 0, len(gs))
	for _, g := range gs {
		reply := make(chan protocol.QueueInfo, 1)
		g.post(infoEv{reply: reply})
		if qi, ok := <-reply; ok {
			out = append(out, qi)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Config.Group < out[j].Config.Group
	})
	return out, nil
}

// Join adds a consumer to a group. maxInFlight 0 takes the group's.
func (m *Manager) Join(topic, groupName, name, addr string, maxInFlight int) (*Consumer, error) {
	if err := protocol.ValidateQueueName("consumer", name); err != nil {
		return nil, err
	}
	if maxInFlight < 0 {
		return nil, protocol.NewBizError(fmt.Sprintf("maxInFlight %d: must be >= 0", maxInFlight))
	}
	g, err := m.group(groupKey{topic, groupName})
	if err != nil {
		return nil, err
	}
	g.smu.Lock()
	limit := g.st.cfg.MaxInFlight
	g.smu.Unlock()
	if maxInFlight == 0 || maxInFlight > limit {
		maxInFlight = limit
	}
	c := &Consumer{g: g, name: name, addr: addr, max: maxInFlight, since: m.now(),
		wake: make(chan struct{}, 1), done: make(chan struct{})}
	errc := make(chan error, 1)
	g.post(joinEv{c: c, err: errc})
	if err := <-errc; err != nil {
		return nil, err
	}
	return c, nil
}

// write records evs of g and applies them to g's durable state, then
// (with wait) waits for the record to count (slaves, fence).
func (m *Manager) write(ctx context.Context, g *group, evs []event, wait bool) error {
	m.wmu.Lock()
	id, err := m.b.PublishSystem(ctx, broker.QueueTopic, wrap(nil, encodeEvents(g.key, evs)), 1)
	if err == nil {
		g.applyDurable(evs)
		m.sinceSnap++
		if m.sinceSnap >= m.opts.SnapshotRecords {
			m.snapshotLocked(ctx)
		}
	}
	m.wmu.Unlock()
	if err != nil || !wait {
		return err
	}
	return m.wait(ctx, id)
}

// writeRaw records one record body (config, delete).
func (m *Manager) writeRaw(ctx context.Context, body []byte) error {
	m.wmu.Lock()
	id, err := m.b.PublishSystem(ctx, broker.QueueTopic, wrap(nil, body), 1)
	if err == nil {
		m.sinceSnap++
	}
	m.wmu.Unlock()
	if err != nil {
		return err
	}
	return m.wait(ctx, id)
}

func (m *Manager) wait(ctx context.Context, id int64) error {
	if m.opts.Sync == nil {
		return nil
	}
	return m.opts.Sync.Wait(ctx, id)
}

// snapshotLocked writes every group's state as one message; the broker
// then removes the files of __queues before it. The caller holds wmu.
func (m *Manager) snapshotLocked(ctx context.Context) {
	m.mu.Lock()
	gs := make([]*group, 0, len(m.groups))
	for _, g := range m.groups {
		gs = append(gs, g)
	}
	m.mu.Unlock()
	recs := wrap(nil, encodeSnapshot())
	n := 1
	for _, g := range gs {
		g.smu.Lock()
		for _, r := range g.st.snapshot() {
			recs = wrap(recs, r)
			n++
		}
		g.smu.Unlock()
	}
	if _, err := m.b.PublishSystem(ctx, broker.QueueTopic, recs, n); err != nil {
		m.log.Warn("queue state snapshot not written; retried later", "err", err)
		return
	}
	m.sinceSnap, m.lastSnap = 0, m.now()
}

func (m *Manager) snapshotTicker(ctx context.Context) {
	defer m.wg.Done()
	t := time.NewTicker(m.opts.SnapshotInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			m.wmu.Lock()
			if m.sinceSnap > 0 {
				m.snapshotLocked(ctx)
			}
			m.wmu.Unlock()
		}
	}
}

// publishDead publishes one dead letter and waits for it to count.
func (m *Manager) publishDead(ctx context.Context, topic string, rec []byte) error {
	if err := m.ensureTopic(ctx, topic); err != nil {
		return err
	}
	id, err := m.b.Publish(ctx, []byte(topic), rec, 1)
	if err != nil {
		return err
	}
	return m.wait(ctx, id)
}
