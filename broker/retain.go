package broker

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/segment"
	"github.com/smssmq/smss/topicblock"
)

// Old files, for retention (lifecycle decides when and how many): the
// broker lists them and removes them one at a time under its rules, so
// that no other package holds a log it could remove files from.
//
//   - Only a prefix of a log's files goes, oldest first, and never the file
//     being written: the remaining files stay contiguous (segment.Log
//     refuses anything else).
//   - A topic's files are removed only while the topic named is still the
//     incarnation they were listed from: a topic deleted and re-created
//     meanwhile reuses the same file names, and a deleted topic's log is
//     closed, so a file never goes from a directory the topic handed over.
//   - The cursor topic is compacted by its snapshots, never aged out.

// ErrTopicReplaced is returned by RemoveOldTopicFile when the topic was
// deleted, or deleted and re-created, since its files were listed.
var ErrTopicReplaced = errors.New("broker: the topic was deleted or re-created since its files were listed")

// OldFile is a log file whose newest message is older than a cutoff.
type OldFile struct {
	ID     int64  // file id: the file is segment.FileName(ID)
	Path   string // the file's path
	Newest int64  // ms of its newest message, 0 when it holds none
}

// TopicOldFiles are the old files of one topic incarnation.
type TopicOldFiles struct {
	Name          string
	CreateEventID int64 // the incarnation the files belong to
	Files         []OldFile
}

// OldBinlogFiles returns the oldest binlog files whose newest block was
// written before cutoff (ms), oldest first. It stops at the first file that
// is not old and before the file being written.
func (b *Broker) OldBinlogFiles(cutoff int64) ([]OldFile, error) {
	return oldPrefix(b.binlog, cutoff, binlogTime)
}

// RemoveOldBinlogFile removes binlog file id, which must be the oldest one
// and not the one being written, and returns the bytes it held.
func (b *Broker) RemoveOldBinlogFile(id int64) (int64, error) {
	return removeOldFile(b.binlog, id)
}

// OldTopicFiles calls fn for every topic but the cursor topic, in name
// order, with the oldest files whose newest message was stored before
// cutoff (ms), or with the error that stopped listing them. A topic
// deleted before it is reached is skipped. An error from fn, from opening
// a topic's log, or ctx ending stops the walk and is returned.
func (b *Broker) OldTopicFiles(ctx context.Context, cutoff int64, fn func(TopicOldFiles, error) error) error {
	for _, t := range b.topicsByName() {
		if err := ctx.Err(); err != nil {
			return err
		}
		if IsSystemTopic(t.meta.Name) { // compacted by snapshots instead
			continue
		}
		l, err := b.readLog(t)
		if err != nil {
			if errors.Is(err, protocol.ErrTopicNotExist) {
				continue
			}
			return err
		}
		b.mu.RLock()
		live := b.topics[t.meta.Name] == t
		b.mu.RUnlock()
		if !live {
			continue // deleted meanwhile
		}
		files, err := oldPrefix(l, cutoff, topicTime)
		if err := fn(TopicOldFiles{Name: t.meta.Name, CreateEventID: t.meta.CreateEventID, Files: files}, err); err != nil {
			return err
		}
	}
	return nil
}

// RemoveOldTopicFile removes file id of topic name, which must be the
// topic's oldest file and not the one being written, as long as the topic
// is still the incarnation created by createEventID (ErrTopicReplaced
// otherwise). It returns the bytes the file held.
func (b *Broker) RemoveOldTopicFile(name string, createEventID, id int64) (int64, error) {
	b.mu.RLock()
	t := b.topics[name]
	b.mu.RUnlock()
	if t == nil || t.meta.CreateEventID != createEventID {
		return 0, ErrTopicReplaced
	}
	l, err := b.readLog(t)
	if errors.Is(err, protocol.ErrTopicNotExist) {
		return 0, ErrTopicReplaced
	}
	if err != nil {
		return 0, err
	}
	// If the topic is deleted from here on, l is closed and refuses.
	return removeOldFile(l, id)
}

func removeOldFile(l *segment.Log, id int64) (int64, error) {
	size := int64(0)
	if st, err := os.Stat(l.Path(id)); err == nil {
		size = st.Size()
	}
	if err := l.RemoveFile(id); err != nil {
		return 0, err
	}
	return size, nil
}

// oldPrefix returns the oldest files of l whose newest message is before
// cutoff, stopping at the first that is not (or at the file being written):
// removing only a prefix keeps the remaining files contiguous.
func oldPrefix(l *segment.Log, cutoff int64, newest func([]byte) (int64, error)) ([]OldFile, error) {
	current := l.Committed().FileID
	var out []OldFile
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
		out = append(out, OldFile{ID: id, Path: l.Path(id), Newest: t})
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
