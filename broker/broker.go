package broker

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/smssmq/smss/broker/msgcount"
	"github.com/smssmq/smss/internal/fsmode"
	"github.com/smssmq/smss/meta"
	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/segment"
	"github.com/smssmq/smss/topicblock"
)

// ErrClosed is returned for commands submitted after Close.
var ErrClosed = errors.New("broker closed")

// ErrStopped is wrapped by the error returned for commands submitted after
// the writer stopped on a fatal storage error.
var ErrStopped = errors.New("writer stopped after a fatal storage error")

// Broker is an open data directory with its writer running. Its state is
// grouped by owner; the locks are taken in the order doc.go gives
// ("Lock order").
type Broker struct {
	opts      Options
	log       *slog.Logger
	meta      *meta.Store
	binlog    *segment.Log
	topicRoot string
	trashDir  string

	mu     sync.RWMutex // guards topics; written by the writer only (lock order: doc.go)
	topics map[string]*topic

	writeQueue              // the writer's queue and token (lead.go)
	w          *writer      // used by the token holder only (lead.go)
	lastID     atomic.Int64 // last assigned eventId, for readers
	life       lifecycle    // Close and the goroutines it waits for
	sampled    atomic.Uint64

	hooks atomic.Pointer[Hooks]
	// slave is the role (IsSlave); only the writer changes it (promote.go).
	slave atomic.Bool
	// epoch is the promotion epoch kept in meta (promote.go).
	epoch atomic.Uint64
	// epochs is the epoch history kept in meta (epochs.go); only the
	// writer replaces it.
	epochs   atomic.Pointer[[]protocol.EpochStart]
	replicas replicaSet
	stats    statsState  // operator views (stats.go)
	cursors  cursorState // stored consumer positions (cursor.go)

	// dedupeIDs is the size of the writer's dedupe window, for readers.
	dedupeIDs atomic.Int64
	disk      *diskGuard // store.minFreeMB (disk.go)
	commit    commitGate // read-committed delivery (commitpoint.go)
	inst      instanceID // the data directory's instance id (instance.go)
	// durableHook is SetDurableHook's function, called by the writer at
	// stage "visible".
	durableHook atomic.Pointer[func(int64)]
}

// writeQueue is the writer's queue and token (lead.go), guarded by qmu:
// queue holds the commands waiting for a group, leading is true while a
// goroutine holds the token (queue is never left non-empty without one),
// closed refuses new commands after Close. room is closed when commands
// leave a full queue (roomWanted: someone waits for that); arrive wakes a
// flushLevel 2 group wait when a command is queued (arriveWanted). qmu is
// a leaf of the lock order (doc.go): nobody holds it while writing, or
// while taking another lock.
type writeQueue struct {
	qmu          sync.Mutex
	queue        []*command
	leading      bool
	closed       bool
	room         chan struct{}
	roomWanted   bool
	arrive       chan struct{}
	arriveWanted bool
	contention   int // lead.go
}

// lifecycle is what Close stops and waits for.
type lifecycle struct {
	closeOnce sync.Once
	stop      chan struct{} // closed by Close: the writer goroutine drains
	done      chan struct{} // closed when the writer goroutine ended
	fatal     chan error    // the error that stopped the writer (Fatal)
	// trash counts the goroutines removing trash entries (trash,
	// emptyTrash); Close and a failed Open wait for them.
	trash sync.WaitGroup
}

// instanceID is the data directory's instance id, once read or made
// (instance.go). mu is a leaf of the lock order (doc.go).
type instanceID struct {
	mu sync.Mutex
	id [InstanceIDLen]byte
	ok bool
}

// topic is the broker's in-memory state of one topic. meta and deleted are
// written by the writer under Broker.mu; log is created once and then only
// appended to by the writer.
type topic struct {
	meta    meta.Topic
	dir     string
	log     *segment.Log
	deleted chan struct{} // closed when the topic is deleted
	// dirty is set by start-up recovery (recover.go) when its replay
	// appended to this topic's file, so that replayer.finish fsyncs it;
	// the running writer tracks unsynced topics in writer.dirty instead.
	dirty bool

	subMu   sync.Mutex          // a leaf (lock order: doc.go)
	subs    map[string]struct{} // active subscribers by who
	lastUse int64               // writer only: ms of the last append

	// hooks are the subscriptions with a commit hook (subinline.go),
	// replaced whole under subMu, read without it by committers.
	hooks atomic.Pointer[[]*Subscription]

	count msgcount.Counter // messages the writer appended, per file (stage "visible", pipeline.go)

	ids *dedupeSet    // writer only: the message ids of the window (dedupe.go)
	lru *list.Element // writer only: in writer.openLRU while its file is open
}

// Open recovers the data directory and starts the writer.
func Open(opts Options) (*Broker, error) {
	opts.setDefaults()
	if opts.Dir == "" {
		return nil, errors.New("broker: Options.Dir is required")
	}
	b := &Broker{
		opts:       opts,
		log:        opts.Logger,
		topicRoot:  filepath.Join(opts.Dir, "topic"),
		trashDir:   filepath.Join(opts.Dir, "trash"),
		topics:     map[string]*topic{},
		writeQueue: writeQueue{room: make(chan struct{}), arrive: make(chan struct{}, 1)},
		life:       lifecycle{stop: make(chan struct{}), done: make(chan struct{}), fatal: make(chan error, 1)},
	}
	b.commit.init(opts.ReadCommitted)
	if err := os.MkdirAll(opts.Dir, fsmode.Dir()); err != nil {
		return nil, fmt.Errorf("broker: create %s: %w", opts.Dir, err)
	}
	b.disk = newDiskGuard(opts.Dir, uint64(max(opts.MinFreeBytes, 0)), b.log, opts.Statfs)
	// check (in newDiskGuard) gave the reserve file back if the disk is
	// that full; without one, a start on a full disk opens read-only
	// (readonly.go) rather than die in badger.
	noRoom := b.disk.startRoom()
	if noRoom != nil {
		if _, err := os.Stat(filepath.Join(opts.Dir, "meta", "MANIFEST")); err != nil {
			return nil, fmt.Errorf("broker: %w (there is no meta store to serve read-only: a first start needs the space)", noRoom)
		}
		b.disk.startReadOnly()
	}
	go b.disk.run(opts.DiskCheckInterval)
	opened := false
	defer func() {
		if !opened {
			b.disk.close()
			b.life.trash.Wait() // recovery may have moved a topic to the trash
		}
	}()
	ms, err := meta.Open(meta.Options{Dir: filepath.Join(opts.Dir, "meta"), Logger: opts.Logger, ReadOnly: noRoom != nil})
	if err != nil && noRoom != nil {
		return nil, fmt.Errorf("broker: %w; a read-only start failed too: it needs a clean shutdown of the previous run (a crashed run leaves a memtable log that only a writable open replays): open meta read-only: %v", noRoom, err)
	}
	if err != nil {
		return nil, fmt.Errorf("broker: open meta: %w", err)
	}
	b.meta = ms
	// Before prepareDirs creates the buckets of a folderCount that may be
	// the wrong one.
	if err := b.checkFolderCount(ms); err != nil {
		ms.Close()
		return nil, err
	}
	if noRoom != nil {
		if err := b.openReadOnly(noRoom); err != nil {
			ms.Close()
			return nil, err
		}
		opened = true
		return b, nil
	}
	if err := b.prepareDirs(); err != nil {
		ms.Close()
		return nil, err
	}
	b.slave.Store(opts.Slave)
	epoch, err := ms.Epoch()
	if err != nil {
		ms.Close()
		return nil, fmt.Errorf("broker: read promotion epoch: %w", err)
	}
	b.epoch.Store(epoch)
	if err := b.loadEpochStarts(); err != nil {
		ms.Close()
		return nil, err
	}
	role := meta.RoleMaster
	if opts.Slave {
		role = meta.RoleSlave
	}
	rb := ms.NewBatch()
	rb.SetRole(role)
	if err := ms.Commit(rb); err != nil {
		ms.Close()
		return nil, fmt.Errorf("broker: store role: %w", err)
	}
	b.binlog, err = segment.Open(segment.Options{Dir: filepath.Join(opts.Dir, "binlog"), MaxFileSize: opts.MaxLogSize,
		Decode: decodeBinlog, NoCache: opts.NoCache, Logger: opts.Logger, OpenFile: opts.OpenFile})
	if err != nil {
		ms.Close()
		return nil, fmt.Errorf("broker: open binlog: %w", err)
	}
	start := time.Now()
	next, err := b.recover()
	if err != nil {
		ms.Close()
		return nil, fmt.Errorf("broker: recovery: %w", err)
	}
	b.lastID.Store(next - 1)
	b.log.Info("recovery finished", "nextEventId", next, "topics", len(b.topics), "took", time.Since(start))
	b.initCursors()
	if err := b.loadCursors(); err != nil {
		// Positions are rebuilt from the topic only; refusing to start
		// would take every topic down for them.
		b.log.Error("stored positions could not be read; subscribers resuming with -1 start from their default", "err", err)
	}
	b.w = newWriter(b, next)
	b.rebuildDedupe(&b.w.dd)
	go b.w.run()
	if b.cursorsOn() {
		go b.runCursorFlusher()
	}
	b.life.trash.Go(b.emptyTrash)
	b.startCounts()
	opened = true
	return b, nil
}

// prepareDirs creates store.path, the binlog and trash dirs and the
// folderCount × folderCount topic buckets of docs/protocol.md §5.1.
func (b *Broker) prepareDirs() error {
	for _, d := range []string{b.opts.Dir, filepath.Join(b.opts.Dir, "binlog"), b.trashDir} {
		if err := os.MkdirAll(d, fsmode.Dir()); err != nil {
			return fmt.Errorf("broker: create %s: %w", d, err)
		}
	}
	for i := 0; i < b.opts.FolderCount; i++ {
		for j := 0; j < b.opts.FolderCount; j++ {
			d := filepath.Join(b.topicRoot, fmt.Sprint(i), fmt.Sprint(j))
			if err := os.MkdirAll(d, fsmode.Dir()); err != nil {
				return fmt.Errorf("broker: create %s: %w", d, err)
			}
		}
	}
	return nil
}

// emptyTrash removes what deletes moved into the trash directory (a
// goroutine of Open's, which Close waits for).
func (b *Broker) emptyTrash() {
	ents, err := os.ReadDir(b.trashDir)
	if err != nil {
		b.log.Warn("read trash", "dir", b.trashDir, "err", err)
		return
	}
	for _, e := range ents {
		p := filepath.Join(b.trashDir, e.Name())
		if err := b.opts.removeTrash(p); err != nil {
			b.log.Warn("empty trash", "path", p, "err", err)
		}
	}
}

// Close stops taking commands, lets the writer finish everything already
// queued, fsyncs, writes a checkpoint and closes the files and the meta
// store. It returns after every goroutine the broker started ended: the
// writer's, the trash removals, the message counts', the positions'
// flusher and the disk guard. The one exception is the meta store's close,
// given up after metaCloseTimeout (closeMeta).
func (b *Broker) Close() error {
	b.life.closeOnce.Do(b.haltCursors) // writes pending positions while the writer runs
	b.qmu.Lock()
	if b.closed {
		b.qmu.Unlock()
		<-b.life.done
		return nil
	}
	b.closed = true
	if b.roomWanted { // submitters waiting for room get ErrClosed
		close(b.room)
		b.room = make(chan struct{})
		b.roomWanted = false
	}
	b.qmu.Unlock()
	b.stats.counts.Halt() // a long message count ends while the writer drains
	close(b.life.stop)
	<-b.life.done
	err := b.w.shutdown()
	b.stats.counts.Finish()
	// The writer no longer deletes anything: the last trash removals
	// end, and the reading below sees the space they gave back.
	b.life.trash.Wait()
	// A fresh reading: on a disk filled to the last byte it deletes the
	// reserve file, so that badger's final memtable flush has room.
	b.disk.check()
	if cerr := b.closeMeta(); cerr != nil && err == nil {
		err = cerr
	}
	b.disk.close()
	return err
}

// metaCloseTimeout bounds closing badger: it retries flushing its memtable
// forever when the disk refuses (full disk, data directory removed), and a
// shutdown must end anyway. Everything acknowledged is in the binlog by
// then; recovery rebuilds meta changes from it.
const metaCloseTimeout = 20 * time.Second

func (b *Broker) closeMeta() error {
	done := make(chan error, 1)
	go func() { done <- b.meta.Close() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("broker: close meta: %w", err)
		}
		return nil
	case <-time.After(metaCloseTimeout):
		b.log.Error("meta store did not close; giving up (the next start replays the binlog)", "timeout", metaCloseTimeout)
		return fmt.Errorf("broker: close meta: not done after %v", metaCloseTimeout)
	}
}

// Fatal receives the error that stopped the writer, if one does.
func (b *Broker) Fatal() <-chan error { return b.life.fatal }

// IsSlave reports whether client writes are refused. It starts as
// Options.Slave and turns false when Promote succeeds: callers must ask at
// each use, never keep the answer.
func (b *Broker) IsSlave() bool { return b.slave.Load() }

// LastEventID returns the last eventId assigned so far.
func (b *Broker) LastEventID() int64 { return b.lastID.Load() }

func (b *Broker) sample() bool {
	n := b.opts.LogSample
	return n > 0 && b.sampled.Add(1)%uint64(n) == 1%uint64(n)
}

func (b *Broker) submit(ctx context.Context, c *command) error {
	if err := b.enqueue(ctx, false, c); err != nil {
		return err
	}
	// Once queued, the command will be executed; wait for its outcome even
	// if ctx ends, so the caller never reports failure for a stored write.
	b.await(c)
	b.noteNoSpace(c.err)
	return c.err
}

// Publish appends count records (already validated with
// protocol.CountRecords) to topic and returns the first eventId.
func (b *Broker) Publish(ctx context.Context, topicName, records []byte, count int) (int64, error) {
	// The name first, then the role: the order of the replies on the
	// wire (docs/protocol.md §11), which the server does not check itself.
	if err := b.checkPub(topicName, records); err != nil {
		return 0, err
	}
	msgID, err := b.publishID(records)
	if err != nil {
		return 0, err
	}
	c := getCommand()
	defer putCommand(c)
	c.op, c.topic, c.records, c.count, c.timestamp = opPub, string(topicName), records, count, b.opts.Now()
	c.msgID = msgID
	if err := b.submit(ctx, c); err != nil {
		return 0, err
	}
	// Counted here, on the caller's goroutine, not by the single writer.
	if c.dup {
		b.opts.Metrics.DedupeHit(topicName)
	} else {
		b.opts.Metrics.PublishedBytes(topicName, count, len(records))
	}
	return c.eventID, nil
}

// CreateTopic creates a topic; expireAt is an absolute ms time, 0 = never.
// It checks the name, the role and the lifetime in the order of
// docs/protocol.md §1.5.3, which the server does not check itself.
func (b *Broker) CreateTopic(ctx context.Context, topicName []byte, expireAt int64) (int64, error) {
	if err := protocol.ValidateTopicName(topicName); err != nil {
		return 0, err
	}
	if b.IsSlave() {
		return 0, protocol.ErrSlaveManage
	}
	if expireAt < 0 || (expireAt > 0 && expireAt-b.opts.Now() < b.opts.MinLifetime.Milliseconds()) {
		return 0, protocol.ErrExpireTooSoon
	}
	if err := reservedErr(topicName); err != nil {
		return 0, err
	}
	if err := b.diskRefusal(0); err != nil {
		return 0, err
	}
	c := getCommand()
	defer putCommand(c)
	c.op, c.topic, c.expireAt, c.timestamp = opCreate, string(topicName), expireAt, b.opts.Now()
	if err := b.submit(ctx, c); err != nil {
		return 0, err
	}
	return c.eventID, nil
}

// DeleteTopic deletes a topic, its files and its meta. Subscribers are woken
// through the topic's deleted channel; the reply does not wait for them.
func (b *Broker) DeleteTopic(ctx context.Context, topicName []byte) (int64, error) {
	if b.IsSlave() {
		return 0, protocol.ErrSlaveManage
	}
	if err := b.checkExistingName(topicName); err != nil {
		return 0, err
	}
	if err := reservedErr(topicName); err != nil {
		return 0, err
	}
	c := getCommand()
	defer putCommand(c)
	c.op, c.topic, c.timestamp = opDelete, string(topicName), b.opts.Now()
	if err := b.submit(ctx, c); err != nil {
		return 0, err
	}
	return c.eventID, nil
}

// checkExistingName applies the topic-name rule of commands that reach an
// existing topic (info, sub, delete): a name the create rule refuses is
// accepted only when a topic of that name exists, created by an original
// server, and its directory stays inside its hashing bucket
// (docs/protocol.md §11).
func (b *Broker) checkExistingName(name []byte) error {
	strict := protocol.ValidateTopicName(name)
	if strict == nil {
		return nil
	}
	if err := protocol.ValidateExistingTopicName(name); err != nil {
		return err
	}
	b.mu.RLock()
	_, ok := b.topics[string(name)]
	b.mu.RUnlock()
	if !ok {
		return strict
	}
	return nil
}

func (b *Broker) view(t *topic) meta.Topic {
	m := t.meta
	m.TopicRoot = topicblock.RelRoot([]byte(m.Name), b.opts.FolderCount)
	return m
}

// Topic returns the meta of one topic, expired-but-not-reaped included.
// A name the topic-name rule refuses gets the rule's error unless it names
// a topic an original server created (checkExistingName).
func (b *Broker) Topic(name []byte) (meta.Topic, error) {
	if err := b.checkExistingName(name); err != nil {
		return meta.Topic{}, err
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	t := b.topics[string(name)]
	if t == nil {
		return meta.Topic{}, protocol.ErrTopicNotExist
	}
	return b.view(t), nil
}

// Topics returns every topic meta entry sorted by name bytes (list, 100).
func (b *Broker) Topics() ([]meta.Topic, error) {
	b.mu.RLock()
	out := make([]meta.Topic, 0, len(b.topics))
	for _, t := range b.topics {
		out = append(out, b.view(t))
	}
	b.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// ValidTopics implements valid list (99): topics created at or before
// eventID (every topic when eventID is 0) that are not expired (docs/protocol.md §11).
func (b *Broker) ValidTopics(eventID int64) ([]meta.Topic, error) {
	all, err := b.Topics()
	if err != nil {
		return nil, err
	}
	now := b.opts.Now()
	out := all[:0]
	for _, t := range all {
		if t.State != meta.StateNormal || t.Expired(now) {
			continue
		}
		if eventID == 0 || t.CreateEventID <= eventID {
			out = append(out, t)
		}
	}
	return out, nil
}

// topicLog opens (once) the log of t. Called by the writer and by recovery.
// ErrDescriptorLimit refuses a write whose topic files cannot be opened
// because the process is out of descriptors (EMFILE/ENFILE). It is a
// business error: the connection stays usable, and the write succeeds
// again once descriptors are freed.
var ErrDescriptorLimit = protocol.NewBizError("too many open files: the server is at its descriptor limit, retry later (raise ulimit -n or lower store.maxOpenTopics)")

// descriptorRefusal turns a failure to open a file for want of descriptors
// into ErrDescriptorLimit: a topic's first file (topicLog), or, in a
// rolled-back group, a topic's reopened or next file, a directory to
// fsync, the binlog's next file. The client learns why without the
// server's paths, the log keeps the detail (sampled). Any other error, and
// a fatal one, stays what it is.
func (b *Broker) descriptorRefusal(err error) error {
	if errors.Is(err, segment.ErrFatal) || !(errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)) {
		return err
	}
	if b.sample() {
		b.log.Warn("cannot open a file: descriptor limit reached", "err", err)
	}
	return ErrDescriptorLimit
}

func (b *Broker) topicLog(t *topic) (*segment.Log, error) {
	if t.log != nil {
		return t.log, nil
	}
	size := b.opts.MaxLogSize
	if IsSystemTopic(t.meta.Name) && b.opts.CursorSegmentBytes < size {
		size = b.opts.CursorSegmentBytes // compaction works per file (cursor.go)
	}
	l, err := segment.Open(segment.Options{Dir: t.dir, MaxFileSize: size, Decode: decodeTopic,
		NoCache: b.opts.NoCache, Logger: b.log, OpenFile: b.opts.OpenFile, ReadOnly: b.ReadOnly() != nil})
	if err != nil {
		// Out of descriptors: the client gets a refusal that says why
		// (not the server's paths); the log keeps the detail, sampled
		// since every write to a closed topic fails the same way until
		// descriptors are freed.
		return nil, b.descriptorRefusal(err)
	}
	b.mu.Lock()
	t.log = l
	b.mu.Unlock()
	return l, nil
}

func (b *Broker) topicDir(name string) string {
	return topicblock.Dir(b.topicRoot, []byte(name), b.opts.FolderCount)
}

// topicsByName is a snapshot of the live topics in name order.
func (b *Broker) topicsByName() []*topic {
	b.mu.RLock()
	ts := make([]*topic, 0, len(b.topics))
	for _, t := range b.topics {
		ts = append(ts, t)
	}
	b.mu.RUnlock()
	sort.Slice(ts, func(i, j int) bool { return ts[i].meta.Name < ts[j].meta.Name })
	return ts
}
