package broker

import (
	"encoding/binary"
	"fmt"
	"github.com/smssmq/smss/protocol"
	"sync"

	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/meta"
	"github.com/smssmq/smss/topicblock"
)

// writerOp is what a command asks the writer to do. It is the writer's own
// vocabulary, not a wire command: a few ops mirror client requests (pub,
// create, delete, delay, delay apply), the rest exist only inside the
// process, and none of them is ever sent or received.
type writerOp uint8

const (
	opPub writerOp = iota + 1
	opCreate
	opDelete
	opDelay
	opDelayApply
	// opReplicated carries a binlog block received from the master.
	opReplicated
	// opSyncTopic inserts a topic meta entry copied from the master (slave
	// start-up topic sync, docs/protocol.md §4.2); it writes no binlog block.
	opSyncTopic
	// opOpenLog asks the writer to open a topic's log for a reader; it
	// writes nothing.
	opOpenLog
	// opCursorSnapshot asks the writer for a snapshot of the cursor table.
	opCursorSnapshot
	// opPromote (Promote) and opEpoch (a slave learning its master's
	// epoch, LearnEpoch) write no binlog block: the epoch lives in meta
	// only, so the binlog stays byte-compatible with the original's.
	opPromote
	opEpoch
	// The writer goroutine's own commands (writer.run, lead.go): the
	// flushLevel 1 flush timer fired, a background fsync ended (synced),
	// the idle timer fired, Close asks for the final drain.
	opFlush
	opSynced
	opIdle
	opDrain
)

// job reports whether o is one of the writer goroutine's own commands.
func (o writerOp) job() bool { return o >= opFlush }

var opNames = [...]string{opPub: "pub", opCreate: "create", opDelete: "delete", opDelay: "delay",
	opDelayApply: "delay apply", opReplicated: "replicated", opSyncTopic: "sync topic", opOpenLog: "open log",
	opCursorSnapshot: "cursor snapshot", opPromote: "promote", opEpoch: "epoch", opFlush: "flush",
	opSynced: "synced", opIdle: "idle", opDrain: "drain"}

func (o writerOp) String() string {
	if int(o) < len(opNames) && opNames[o] != "" {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// command is one request to the writer. The submitter owns it until it is
// queued and again after done fires; in between only the writer touches it.
// Its fields are grouped by the stage of the group commit that reads or
// writes them (pipeline.go).
type command struct {
	// The request, filled in by the submitter.
	op        writerOp
	topic     string
	records   []byte
	count     int
	expireAt  int64 // create: the lifetime; delete: guard for expiry deletes
	timestamp int64
	trigger   int64  // delay: absolute trigger time
	epoch     uint64 // promote: the new epoch; learn epoch: the master's
	synced    bgSync // opSynced: the background fsync's outcome
	fromMaster
	dedupeMark

	// The outcome, filled in by the writer.
	eventID int64
	err     error

	handoff
}

// fromMaster is what a slave's command carries from its master: a
// replicated binlog block or a topic meta entry.
type fromMaster struct {
	raw      []byte // replicated binlog block
	replCmd  uint8  // command of raw
	prevLast int64  // replicated: last eventId of the block that must precede, -1 = unchecked
	// replicated: raw decoded by the submitter (it validates raw before
	// queueing it), so the writer does not parse it again. Aliases raw.
	repl     binlog.Block
	replLast int64
	sync     *meta.Topic // opSyncTopic: the entry copied from the master
	// opEpoch: the master's epoch history, which the slave adopts (nil:
	// learn the epoch only).
	epochs []protocol.EpochStart
}

// dedupeMark is the command's part in the dedupe window (dedupe.go): the
// request's message id (zero for none), whether it was settled as a
// duplicate (of dupOf when that was in flight in the same group), and the
// window entry it adds if its group commits.
type dedupeMark struct {
	msgID   idKey
	dup     bool
	dupOf   *command
	ddTopic *topic
	ddID    int64
	ddAt    int64
}

// handoff is how the command reaches its submitter again (lead.go).
type handoff struct {
	// done is signalled once the command was executed, or, with lead set,
	// when the token is handed to its submitter.
	done   chan struct{}
	lead   bool
	gather bool // with lead: gather a group first (writer.gather)
	// batched: submitted by PublishBatch. Its connection's next request
	// comes through the same batch caller, which is blocked in this group
	// until it ends, so the group wait does not count on it (expectGroup).
	batched bool
}

var commandPool = sync.Pool{New: func() any { return &command{handoff: handoff{done: make(chan struct{}, 1)}} }}

func getCommand() *command { return commandPool.Get().(*command) }

func putCommand(c *command) {
	done := c.done
	*c = command{handoff: handoff{done: done}}
	commandPool.Put(c)
}

// size is the command's share of a group's byte budget.
func (c *command) size() int { return len(c.records) + len(c.topic) + 64 }

// metaSize estimates the bytes the command adds to the group's meta
// transaction. Values of 64 KiB and more live in badger's value log and
// cost only a pointer in the transaction.
func (c *command) metaSize() int {
	switch c.op {
	case opDelay, opDelayApply:
	case opReplicated:
		if c.replCmd != binlog.CmdDelay && c.replCmd != binlog.CmdDelayApply {
			return 0
		}
	default:
		return 0
	}
	v := len(c.records) + len(c.raw)
	if v >= 64<<10 {
		v = 16
	}
	return v + len(c.topic) + 64
}

// exclusive commands change the topic map and run alone in their group, so
// that no other command of a group can observe a half-applied create/delete.
func (c *command) exclusive() bool {
	switch c.op {
	case opCreate, opDelete, opSyncTopic, opPromote, opEpoch, opCursorSnapshot, opFlush, opSynced, opIdle, opDrain:
		return true
	case opReplicated:
		return c.replCmd == binlog.CmdCreate || c.replCmd == binlog.CmdDelete
	}
	return false
}

// decodeBinlog adapts binlog.DecodeSpan to the segment layer: a block's
// first and last eventId (segment.Decoder), which DecodeSpan finds in one
// walk of the records. An incomplete block's error is already the one
// segment branches on (codec.ErrIncomplete).
func decodeBinlog(buf []byte) (int64, int64, int, error) {
	b, last, n, err := binlog.DecodeSpan(buf)
	if err != nil {
		return 0, 0, 0, err
	}
	return b.EventID, last, n, nil
}

// decodeTopic adapts topicblock.DecodeBlock to the segment layer.
func decodeTopic(buf []byte) (int64, int64, int, error) {
	b, n, err := topicblock.DecodeBlock(buf)
	if err != nil {
		return 0, 0, 0, err
	}
	return b.EventID, b.EventID, n, nil
}

func int64Payload(v int64) []byte {
	return binary.LittleEndian.AppendUint64(nil, uint64(v))
}
