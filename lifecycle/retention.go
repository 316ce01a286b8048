package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/broker"
	"github.com/smssmq/smss/segment"
	"github.com/smssmq/smss/topicblock"
)

// Retention defaults.
const (
	DefaultMaxDays           = 7
	DefaultRetentionInterval = 2 * time.Hour
	DefaultMaxSlaveKeepFiles = 64
)

const dayMs = 24 * 60 * 60 * 1000

// RetentionOptions configure a Retention. Zero values take the documented
// defaults.
type RetentionOptions struct {
	// MaxDays is store.maxDays: a file whose newest message is older than
	// this is removed. Default 7.
	MaxDays int
	// Interval is store.clearInterval: the period of runs; the first run
	// comes one interval after Start. Default 2 h.
	Interval time.Duration
	// MaxSlaveKeepFiles is store.maxSlaveKeepFiles: how many binlog files
	// past MaxDays are kept because a connected slave still reads them.
	// Default 64; a negative value keeps none.
	MaxSlaveKeepFiles int
	// Now is the clock in ms; tests replace it to age files.
	Now    func() int64
	Logger *slog.Logger
}

// Retention removes old binlog and topic files.
type Retention struct {
	b    *broker.Broker
	opts RetentionOptions
	log  *slog.Logger

	runMu     sync.Mutex // one run at a time
	startOnce sync.Once
	stopOnce  sync.Once
	stop      chan struct{}
	done      chan struct{}
	ctx       context.Context
	cancel    context.CancelFunc
}

// RetentionReport sums up one run.
type RetentionReport struct {
	BinlogFiles  int   // binlog files removed
	TopicFiles   int   // topic files removed
	Bytes        int64 // bytes they held
	KeptForSlave int   // old binlog files kept for a connected slave
}

// NewRetention returns a retention job for b that is not yet running.
// Unlike the reaper it runs on slaves too: they keep their own files.
func NewRetention(b *broker.Broker, opts RetentionOptions) *Retention {
	if opts.MaxDays <= 0 {
		opts.MaxDays = DefaultMaxDays
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultRetentionInterval
	}
	if opts.MaxSlaveKeepFiles == 0 {
		opts.MaxSlaveKeepFiles = DefaultMaxSlaveKeepFiles
	}
	opts.MaxSlaveKeepFiles = max(opts.MaxSlaveKeepFiles, 0)
	if opts.Now == nil {
		opts.Now = func() int64 { return time.Now().UnixMilli() }
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Retention{b: b, opts: opts, log: opts.Logger, stop: make(chan struct{}), done: make(chan struct{}),
		ctx: ctx, cancel: cancel}
}

// Start runs the job every Interval, the first time one Interval from now.
func (r *Retention) Start() {
	r.startOnce.Do(func() { go r.loop() })
}

// Stop ends the job after the file being removed, waiting until ctx ends.
// Call it before closing the broker.
func (r *Retention) Stop(ctx context.Context) error {
	r.stopOnce.Do(func() {
		close(r.stop)
		r.cancel()
		r.startOnce.Do(func() { close(r.done) })
	})
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stop retention: %w", ctx.Err())
	}
}

func (r *Retention) loop() {
	defer close(r.done)
	t := time.NewTicker(r.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-r.stop:
			return
		}
		// Errors are logged by the run; the next one comes an interval
		// later, so a failing disk costs one attempt per interval.
		r.safeRun()
	}
}

func (r *Retention) safeRun() {
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("retention run panicked", "panic", p, "stack", string(debug.Stack()))
		}
	}()
	_, _ = r.RunOnce(r.ctx)
}

// RunOnce removes every file that is due now and reports what it did.
// Errors about single logs do not stop the run; they are logged and
// returned together.
func (r *Retention) RunOnce(ctx context.Context) (RetentionReport, error) {
	r.runMu.Lock()
	defer r.runMu.Unlock()
	start := time.Now()
	now := r.opts.Now()
	cutoff := now - int64(r.opts.MaxDays)*dayMs
	var rep RetentionReport
	var errs []error

	n, kept, bytes, err := r.binlog(ctx, cutoff)
	rep.BinlogFiles, rep.KeptForSlave, rep.Bytes = n, kept, bytes
	if err != nil {
		errs = append(errs, err)
	}
	err = r.b.TopicLogs(func(name string, l *segment.Log) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		m, err := r.b.Topic([]byte(name))
		if err != nil {
			return nil // deleted meanwhile
		}
		n, bytes, err := r.topic(ctx, name, l, m.CreateEventID, cutoff)
		rep.TopicFiles += n
		rep.Bytes += bytes
		if err != nil && !errors.Is(err, os.ErrNotExist) { // a topic deleted meanwhile is no error
			errs = append(errs, fmt.Errorf("topic %s: %w", name, err))
		}
		return nil
	})
	if err != nil {
		errs = append(errs, err)
	}
	err = errors.Join(errs...)
	level := slog.LevelInfo
	if err != nil {
		level = slog.LevelWarn
	}
	r.log.Log(context.Background(), level, "retention run finished", "binlogFilesRemoved", rep.BinlogFiles,
		"topicFilesRemoved", rep.TopicFiles, "bytes", rep.Bytes, "keptForSlave", rep.KeptForSlave,
		"olderThan", time.UnixMilli(cutoff).UTC().Format(time.RFC3339), "took", time.Since(start), "err", err)
	return rep, err
}

// binlog removes old binlog files, keeping those a connected slave reads
// (up to MaxSlaveKeepFiles).
func (r *Retention) binlog(ctx context.Context, cutoff int64) (removed, keptForSlave int, bytes int64, err error) {
	l := r.b.Binlog()
	cands, err := oldPrefix(l, cutoff, binlogTime)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("binlog: %w", err)
	}
	if slaveFile, ok := r.b.OldestReplicaFile(); ok {
		needed := 0
		for _, c := range cands {
			if c.id >= slaveFile {
				needed++
			}
		}
		keep := min(needed, r.opts.MaxSlaveKeepFiles)
		if needed > keep {
			r.log.Warn("removing binlog files a connected slave still needs: more than store.maxSlaveKeepFiles are past store.maxDays; the slave will have to resync",
				"slaveFile", slaveFile, "slaveFileName", segment.FileName(slaveFile), "neededOldFiles", needed, "maxSlaveKeepFiles", r.opts.MaxSlaveKeepFiles)
		}
		cands = cands[:len(cands)-keep]
		keptForSlave = keep
	}
	if err := ctx.Err(); err != nil {
		return 0, keptForSlave, 0, err
	}
	removed, bytes, err = r.remove(ctx, l, "binlog", cands, func() bool { return true })
	if err != nil {
		err = fmt.Errorf("binlog: %w", err)
	}
	return removed, keptForSlave, bytes, err
}

// topic removes the old files of one topic's log l, which belongs to the
// incarnation created by createEventID. The log's file names are shared by
// every incarnation of the name: if the topic is deleted and re-created
// during the run, l must not remove the new topic's files, so the
// incarnation is checked before each removal.
func (r *Retention) topic(ctx context.Context, name string, l *segment.Log, createEventID, cutoff int64) (int, int64, error) {
	same := func() bool {
		m, err := r.b.Topic([]byte(name))
		return err == nil && m.CreateEventID == createEventID
	}
	if !same() {
		return 0, 0, nil
	}
	cands, err := oldPrefix(l, cutoff, topicTime)
	if err != nil {
		return 0, 0, err
	}
	return r.remove(ctx, l, "topic "+name, cands, same)
}

// oldFile is a file chosen for removal.
type oldFile struct {
	id     int64
	newest int64 // ms of its newest message, 0 when it holds none
}

// oldPrefix returns the oldest files of l whose newest message is before
// cutoff, stopping at the first that is not (or at the file being written):
// removing only a prefix keeps the remaining files contiguous.
func oldPrefix(l *segment.Log, cutoff int64, newest func([]byte) (int64, error)) ([]oldFile, error) {
	current := l.Committed().FileID
	var out []oldFile
	for _, id := range l.Files() {
		if id >= current {
			break
		}
		last, err := l.LastBlock(id)
		if err != nil {
			return out, fmt.Errorf("read the last block of %s: %w", l.Path(id), err)
		}
		var t int64
		if last != nil {
			if t, err = newest(last); err != nil {
				return out, fmt.Errorf("decode the last block of %s: %w", l.Path(id), err)
			}
			if t >= cutoff {
				break
			}
		}
		out = append(out, oldFile{id: id, newest: t})
	}
	return out, nil
}

func binlogTime(b []byte) (int64, error) {
	blk, _, err := binlog.DecodeBlock(b)
	return blk.WriteTime, err
}

func topicTime(b []byte) (int64, error) {
	blk, _, err := topicblock.DecodeBlock(b)
	return blk.Ts, err
}

// remove deletes files oldest first and logs each one, as long as valid
// says the log is still the one the files were chosen from.
func (r *Retention) remove(ctx context.Context, l *segment.Log, what string, files []oldFile, valid func() bool) (int, int64, error) {
	var bytes int64
	for i, f := range files {
		if err := ctx.Err(); err != nil {
			return i, bytes, err
		}
		if !valid() {
			r.log.Info("retention skipped a log that was deleted during the run", "log", what)
			return i, bytes, nil
		}
		path := l.Path(f.id)
		size := int64(0)
		if st, err := os.Stat(path); err == nil {
			size = st.Size()
		}
		if err := l.RemoveFile(f.id); err != nil {
			return i, bytes, err
		}
		bytes += size
		newest := "none (empty file)"
		if f.newest != 0 {
			newest = time.UnixMilli(f.newest).UTC().Format(time.RFC3339)
		}
		r.log.Info("retention removed an old file", "log", what, "file", path, "bytes", size, "newestMessage", newest)
	}
	return len(files), bytes, nil
}
