package metrics

// CursorInfo is one stored consumer position (issue 22): the last eventId
// (topic, who) acknowledged, kept by the server whether or not the
// subscriber is connected.
type CursorInfo struct {
	Topic string `json:"topic"`
	Who   string `json:"who"`
	// EventID is the newest acknowledged eventId, Stored the one written
	// to the cursor topic (-1 while none is written yet); they differ
	// for at most the flush interval.
	EventID int64 `json:"eventId"`
	Stored  int64 `json:"stored"`
	// Lag is the number of messages of the topic after EventID, -1 when
	// it cannot be counted (e.g. the topic's files are unreadable).
	Lag int64 `json:"lag"`
	// Updated is the ms time of the last ack or write.
	Updated int64 `json:"updated"`
	// Active reports a live subscription of (topic, who) on this server.
	Active bool `json:"active"`
}

// CursorSource is implemented by a Source that keeps consumer positions;
// the collector exports them when it is.
type CursorSource interface {
	Cursors() []CursorInfo
}
