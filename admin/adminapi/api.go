// Package adminapi holds the JSON shapes of smss's admin API (docs in package
// admin): what the admin server writes and what smssctl's stats and top
// (package adminclient) read. It is its own package so that the client does
// not link the server (its HTTP handlers, Prometheus, the embedded
// dashboard), and the server does not link the terminal views.
package adminapi

import (
	"github.com/smssmq/smss/metrics"
	"github.com/smssmq/smss/protocol"
)

// DefaultListen is the address the sample config suggests for admin.listen.
// The listener itself is off unless configured.
const DefaultListen = "127.0.0.1:12380"

// TopicView is one entry of /api/topics: the meta entry (docs/protocol.md §2.2 field
// names) plus its state name, on-disk figures, live subscriber count and
// what this process recorded for it.
type TopicView struct {
	protocol.TopicInfo
	// Status is metrics.TopicStateNormal, TopicStateExpired or
	// TopicStateDeleted.
	Status      string                 `json:"status"`
	Stats       *metrics.TopicStats    `json:"stats,omitempty"`
	Subscribers int                    `json:"subscribers"`
	Counters    *metrics.TopicCounters `json:"counters,omitempty"`
}

// Info is /api/info.
type Info struct {
	metrics.ServerInfo
	Now           int64   `json:"now"`
	UptimeSeconds float64 `json:"uptimeSeconds"`
	Ready         bool    `json:"ready"`
	ReadyReason   string  `json:"readyReason,omitempty"`
	AuthRequired  bool    `json:"authRequired"`
}

// ErrorBody is the JSON body of every error answer.
type ErrorBody struct {
	Error string `json:"error"`
}

// Snapshot is what /api/events pushes and /api/snapshot returns: the
// activity of the last sample interval plus the lag of consumers and slaves.
type Snapshot struct {
	Time        int64         `json:"time"` // ms
	Rates       metrics.Rates `json:"rates"`
	LastEventID int64         `json:"lastEventId"`
	Ready       bool          `json:"ready"`
	ReadyReason string        `json:"readyReason,omitempty"`
	// Subscribers are the live subscriptions, largest lag first, at most
	// 100 of SubscriberCount; MaxLag is the largest lag of all.
	Subscribers     []metrics.SubscriberInfo `json:"subscribers"`
	SubscriberCount int                      `json:"subscriberCount"`
	MaxLag          int64                    `json:"maxLag"`
	Replication     metrics.ReplicationInfo  `json:"replication"`
	// Topics are the topics with traffic in the interval, busiest first,
	// at most 50.
	Topics []TopicRate `json:"topics"`
}

// TopicRate is one topic's traffic over a sample interval. Name is the
// topic's label value (invalid UTF-8 replaced, or metrics.OtherTopicLabel).
type TopicRate struct {
	Name                string  `json:"name"`
	MsgsPerSec          float64 `json:"msgsPerSec"`
	BytesPerSec         float64 `json:"bytesPerSec"`
	DeliveredMsgsPerSec float64 `json:"deliveredMsgsPerSec"`
}

// Point is one entry of the history event: the rates of one interval.
type Point struct {
	Time  int64         `json:"time"`
	Rates metrics.Rates `json:"rates"`
}
