package meta

import (
	"encoding/binary"
	"fmt"
)

// Topic states (docs/protocol.md §5.8).
const (
	StateNormal  uint8 = 0
	StateDeleted uint8 = 1
)

// TopicValueSize is the length of a norm@ value.
const TopicValueSize = 41

// Topic is one topic's meta entry. The field order and JSON names are those
// of the info/list replies (docs/protocol.md §2.2); TopicRoot is not stored, it is filled
// in by whoever knows store.folderCount.
type Topic struct {
	Name               string `json:"name"`
	CreateTime         int64  `json:"createTimeStamp"`
	ExpireAt           int64  `json:"expireAt"`
	CreateEventID      int64  `json:"createEventId"`
	StateChangeTime    int64  `json:"stateChangeTime"`
	StateChangeEventID int64  `json:"stateChangeEventId"`
	State              uint8  `json:"state"`
	TopicRoot          string `json:"topicRoot"`
}

// Expired reports whether the topic's lifetime has ended at nowMs.
func (t *Topic) Expired(nowMs int64) bool { return t.ExpireAt > 0 && nowMs >= t.ExpireAt }

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
