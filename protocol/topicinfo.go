package protocol

// Topic states as stored in meta and shown in the info/list replies' "state"
// field (docs/protocol.md §5.8, §2.2).
const (
	TopicStateNormal  uint8 = 0
	TopicStateDeleted uint8 = 1
)

// TopicInfo is one topic's description as the topic info (65), valid list
// (99) and list (100) replies carry it in JSON. The field order and JSON names are the wire
// format (docs/protocol.md §2.2); meta stores the same fields (meta.Topic is
// an alias), so the server answers list/info without a conversion. It lives
// here rather than in meta so that packages that only describe topics
// (server, metrics, admin, smssctl) do not link the meta store's badger.
// TopicRoot is not stored; it is filled in by whoever knows the folder count.
type TopicInfo struct {
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
func (t *TopicInfo) Expired(nowMs int64) bool { return t.ExpireAt > 0 && nowMs >= t.ExpireAt }
