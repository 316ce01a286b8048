package metrics

import "github.com/prometheus/client_golang/prometheus"

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

var (
	descCursorLag = desc("cursor_lag_messages", "Messages of the topic after the stored position of (topic, who); kept while the subscriber is away.", "topic", "who")
	descCursorPos = desc("cursor_position", "Stored position of (topic, who): the last eventId it acknowledged.", "topic", "who")
	cursorDescs   = []*prometheus.Desc{descCursorLag, descCursorPos}
)

func collectCursors(e *emitter, cursors []CursorInfo) {
	seen := map[[2]string]bool{}
	for _, c := range cursors {
		k := [2]string{labelValue(c.Topic), labelValue(c.Who)}
		if seen[k] {
			continue
		}
		seen[k] = true
		if c.Lag >= 0 {
			e.gauge(descCursorLag, float64(c.Lag), k[0], k[1])
		}
		e.gauge(descCursorPos, float64(c.EventID), k[0], k[1])
	}
}
