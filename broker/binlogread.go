package broker

import (
	"fmt"

	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/segment"
)

// Reads of the binlog for the rest of the process: a slave's position and
// divergence check (replication), the replication lag (cmd/smss). They see
// committed blocks only; the binlog itself stays the writer's.

// NewestBinlogBlock returns the newest committed block of the binlog,
// decoded; ok=false when the binlog holds none. It reads the newest
// files' indexes and one block, never whole files.
func (b *Broker) NewestBinlogBlock() (blk binlog.Block, ok bool, err error) {
	raw, id, err := b.binlog.NewestBlock()
	if err != nil {
		return binlog.Block{}, false, fmt.Errorf("broker: last block of binlog file %d: %w", id, err)
	}
	if raw == nil {
		return binlog.Block{}, false, nil
	}
	if blk, _, err = binlog.DecodeBlock(raw); err != nil {
		return binlog.Block{}, false, fmt.Errorf("broker: last block of binlog file %d: %w", id, err)
	}
	return blk, true, nil
}

// BinlogBlockAt returns the binlog block holding eventId id: the last block
// whose first eventId is <= id, or the oldest block when id is below it
// (segment.Log.BlockAt).
func (b *Broker) BinlogBlockAt(id int64) (segment.Block, bool, error) {
	return b.binlog.BlockAt(id)
}

// NextBinlogBlockFirst returns the first eventId of the binlog block after
// the one starting with first, ok=false at the end of the binlog.
func (b *Broker) NextBinlogBlockFirst(first int64) (int64, bool, error) {
	return b.binlog.NextBlockFirst(first)
}

// OldestBinlogEventID returns the first eventId of the oldest retained
// binlog block, ok=false when the binlog holds none.
func (b *Broker) OldestBinlogEventID() (int64, bool, error) {
	return b.binlog.FirstEventID()
}
