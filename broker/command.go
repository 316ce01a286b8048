package broker

import (
	"encoding/binary"
	"sync"

	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/meta"
	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/topicblock"
)

// cmdOpenLog asks the writer to open a topic's log for a reader; it writes
// nothing.
const cmdOpenLog protocol.Command = 250

// command is one request to the writer. The submitter owns it until it is
// sent and again after done fires; in between only the writer touches it.
type command struct {
	cmd       protocol.Command
	topic     string
	records   []byte
	count     int
	expireAt  int64 // create: the lifetime; delete: guard for expiry deletes
	timestamp int64
	trigger   int64  // delay: absolute trigger time
	raw       []byte // replicated binlog block
	replCmd   uint8  // command of raw
	sync      *meta.Topic
	prevLast  int64 // replicated: last eventId of the block that must precede, -1 = unchecked
	// replicated: raw decoded by the submitter (it validates raw before
	// queueing it), so the writer does not parse it again. Aliases raw.
	repl     binlog.Block
	replLast int64
	epoch    uint64 // promote: the new epoch; learn epoch: the master's

	// Dedupe (dedupe.go): the request's message id (zero for none), whether
	// it was settled as a duplicate (of dupOf when that was in flight in
	// the same group), and the window entry it adds if its group commits.
	msgID   idKey
	dup     bool
	dupOf   *command
	ddTopic *topic
	ddID    int64
	ddAt    int64

	eventID int64
	err     error
	done    chan struct{}
}

var commandPool = sync.Pool{New: func() any { return &command{done: make(chan struct{}, 1)} }}

func getCommand() *command { return commandPool.Get().(*command) }

func putCommand(c *command) {
	done := c.done
	*c = command{done: done}
	commandPool.Put(c)
}

// size is the command's share of a group's byte budget.
func (c *command) size() int { return len(c.records) + len(c.topic) + 64 }

// metaSize estimates the bytes the command adds to the group's meta
// transaction. Values of 64 KiB and more live in badger's value log and
// cost only a pointer in the transaction.
func (c *command) metaSize() int {
	switch c.cmd {
	case protocol.CmdDelay, protocol.CmdDelayApply:
	case cmdReplicated:
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
	switch c.cmd {
	case protocol.CmdCreate, protocol.CmdDelete, cmdSyncTopic, cmdPromote, cmdEpoch, cmdCursorSnapshot:
		return true
	case cmdReplicated:
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
