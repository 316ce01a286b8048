package meta

import (
	"encoding/binary"
	"fmt"

	"github.com/smssmq/smss/protocol"
)

// Topic states (docs/protocol.md §5.8).
const (
	StateNormal  = protocol.TopicStateNormal
	StateDeleted = protocol.TopicStateDeleted
)

// TopicValueSize is the length of a norm@ value.
const TopicValueSize = 41

// Topic is one topic's meta entry. It is the wire type protocol.TopicInfo
// (docs/protocol.md §2.2 field order and JSON names), aliased so the store and
// the info/list replies share one definition without packages that only
// describe topics importing meta (and so badger). TopicRoot is not stored.
type Topic = protocol.TopicInfo

// EncodeTopicValue returns the 41-byte norm@ value of t.
func EncodeTopicValue(t *Topic) []byte {
	b := make([]byte, TopicValueSize)
	binary.LittleEndian.PutUint64(b[0:], uint64(t.CreateTime))
	binary.LittleEndian.PutUint64(b[8:], uint64(t.ExpireAt))
	binary.LittleEndian.PutUint64(b[16:], uint64(t.CreateEventID))
	binary.LittleEndian.PutUint64(b[24:], uint64(t.StateChangeTime))
	binary.LittleEndian.PutUint64(b[32:], uint64(t.StateChangeEventID))
	b[40] = t.State
	return b
}

// DecodeTopicValue parses a norm@ value for the topic called name.
func DecodeTopicValue(name string, b []byte) (Topic, error) {
	if len(b) != TopicValueSize {
		return Topic{}, fmt.Errorf("topic %q meta value: %d bytes, want %d", name, len(b), TopicValueSize)
	}
	return Topic{
		Name:               name,
		CreateTime:         int64(binary.LittleEndian.Uint64(b[0:])),
		ExpireAt:           int64(binary.LittleEndian.Uint64(b[8:])),
		CreateEventID:      int64(binary.LittleEndian.Uint64(b[16:])),
		StateChangeTime:    int64(binary.LittleEndian.Uint64(b[24:])),
		StateChangeEventID: int64(binary.LittleEndian.Uint64(b[32:])),
		State:              b[40],
	}, nil
}
