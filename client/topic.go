package client

import (
	"encoding/json"
	"fmt"
	"time"
)

// TopicState is the state field of a topic (0 normal, 1 deleted).
type TopicState uint8

// Topic states (docs/protocol.md §2.2).
const (
	TopicNormal  TopicState = 0
	TopicDeleted TopicState = 1
)

// TopicInfo is a topic's meta data as reported by topic info and list.
type TopicInfo struct {
	Name string
	// CreatedAt is when this server created the topic (per node).
	CreatedAt time.Time
	// ExpireAt is when the topic expires; the zero Time means permanent.
	ExpireAt           time.Time
	CreateEventID      int64
	StateChangeTime    time.Time
	StateChangeEventID int64
	State              TopicState
	// Root is the topic's directory under the server's topic root.
	Root string
}

// Permanent reports whether the topic never expires.
func (t *TopicInfo) Permanent() bool { return t.ExpireAt.IsZero() }

// Expired reports whether the topic's lifetime is over at now.
func (t *TopicInfo) Expired(now time.Time) bool {
	return !t.Permanent() && !now.Before(t.ExpireAt)
}

// wireTopic is the JSON object of docs/protocol.md §2.2, field order included.
type wireTopic struct {
	Name               string `json:"name"`
	CreateTimeStamp    int64  `json:"createTimeStamp"`
	ExpireAt           int64  `json:"expireAt"`
	CreateEventID      int64  `json:"createEventId"`
	StateChangeTime    int64  `json:"stateChangeTime"`
	StateChangeEventID int64  `json:"stateChangeEventId"`
	State              uint8  `json:"state"`
	TopicRoot          string `json:"topicRoot"`
}

func msTime(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

func timeMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func (w *wireTopic) info() TopicInfo {
	return TopicInfo{
		Name:               w.Name,
		CreatedAt:          msTime(w.CreateTimeStamp),
		ExpireAt:           msTime(w.ExpireAt),
		CreateEventID:      w.CreateEventID,
		StateChangeTime:    msTime(w.StateChangeTime),
		StateChangeEventID: w.StateChangeEventID,
		State:              TopicState(w.State),
		Root:               w.TopicRoot,
	}
}

// MarshalJSON writes the server's JSON form (docs/protocol.md §2.2, times in ms).
func (t TopicInfo) MarshalJSON() ([]byte, error) {
	return json.Marshal(wireTopic{
		Name:               t.Name,
		CreateTimeStamp:    timeMs(t.CreatedAt),
		ExpireAt:           timeMs(t.ExpireAt),
		CreateEventID:      t.CreateEventID,
		StateChangeTime:    timeMs(t.StateChangeTime),
		StateChangeEventID: t.StateChangeEventID,
		State:              uint8(t.State),
		TopicRoot:          t.Root,
	})
}

// UnmarshalJSON reads the server's JSON form.
func (t *TopicInfo) UnmarshalJSON(b []byte) error {
	var w wireTopic
	if err := json.Unmarshal(b, &w); err != nil {
		return fmt.Errorf("decode topic info: %w", err)
	}
	*t = w.info()
	return nil
}

// parseTopicList decodes a list reply; an empty body is the empty list.
func parseTopicList(body []byte) ([]TopicInfo, error) {
	if len(body) == 0 {
		return nil, nil
	}
	var ws []wireTopic
	if err := json.Unmarshal(body, &ws); err != nil {
		return nil, fmt.Errorf("decode topic list: %w", err)
	}
	out := make([]TopicInfo, len(ws))
	for i := range ws {
		out[i] = ws[i].info()
	}
	return out, nil
}
