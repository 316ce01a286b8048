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

	"github.com/smssmq/smss/broker"
	"github.com/smssmq/smss/segment"
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
	err = r.b.OldTopicFiles(ctx, cutoff, func(tf broker.TopicOldFiles, err error) error {
		if err == nil {
			var n int
			var bytes int64
			n, bytes, err = r.topic(ctx, tf)
			rep.TopicFiles += n
			rep.Bytes += bytes
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) { // a topic deleted meanwhile is no error
			errs = append(errs, fmt.Errorf("topic %s: %w", tf.Name, err))
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
	cands, err := r.b.OldBinlogFiles(cutoff)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("binlog: %w", err)
	}
	if slaveFile, ok := r.b.OldestReplicaFile(); ok {
		needed := 0
		for _, c := range cands {
			if c.ID >= slaveFile {
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
	removed, bytes, err = r.remove(ctx, "binlog", cands, r.b.RemoveOldBinlogFile)
	if err != nil {
		err = fmt.Errorf("binlog: %w", err)
	}
	return removed, keptForSlave, bytes, err
}

// topic removes the old files of one topic incarnation. The file names are
// shared by every incarnation of the name: the broker refuses a removal
// (ErrTopicReplaced) once the topic was deleted or re-created during the
// run, so that the new topic's files stay.
func (r *Retention) topic(ctx context.Context, tf broker.TopicOldFiles) (int, int64, error) {
	return r.remove(ctx, "topic "+tf.Name, tf.Files, func(id int64) (int64, error) {
		return r.b.RemoveOldTopicFile(tf.Name, tf.CreateEventID, id)
	})
}

// remove deletes files oldest first through rm, which returns the bytes a
// file held, and logs each one. It stops without an error at a log that
// was deleted during the run.
func (r *Retention) remove(ctx context.Context, what string, files []broker.OldFile, rm func(id int64) (int64, error)) (int, int64, error) {
	var bytes int64
	for i, f := range files {
		if err := ctx.Err(); err != nil {
			return i, bytes, err
		}
		size, err := rm(f.ID)
		if errors.Is(err, broker.ErrTopicReplaced) {
			r.log.Info("retention skipped a log that was deleted during the run", "log", what)
			return i, bytes, nil
		}
		if err != nil {
			return i, bytes, err
		}
		bytes += size
		newest := "none (empty file)"
		if f.Newest != 0 {
			newest = time.UnixMilli(f.Newest).UTC().Format(time.RFC3339)
		}
		r.log.Info("retention removed an old file", "log", what, "file", f.Path, "bytes", size, "newestMessage", newest)
	}
	return len(files), bytes, nil
}
