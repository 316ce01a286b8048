package metrics

import (
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
)

// OtherTopicLabel is the topic label of the counters of topics beyond
// Options.MaxTopics. It contains '/', which no topic name may (docs/protocol.md §11), so
// it never collides with a real topic.
const OtherTopicLabel = "/other"

// TopicCounters are one topic's cumulative counters.
type TopicCounters struct {
	Publishes  int64 `json:"publishes"`
	Messages   int64 `json:"messages"`
	Bytes      int64 `json:"bytes"`
	DelivMsgs  int64 `json:"deliveredMessages"`
	DelivBytes int64 `json:"deliveredBytes"`
	// DedupeHits counts pub and delay requests answered from the dedupe
	// window (duplicates of a stored message id), not stored again.
	DedupeHits int64 `json:"dedupeHits"`
}

// topicSeries are one label's counters. They are plain atomics exported by
// topicSet's Collect, which keeps the hot path to a map load and a few
// atomic adds, and makes dropping a topic a map delete.
type topicSeries struct {
	label                          string
	pubs, msgs, bytes, dmsgs, dbts atomic.Int64
	dedupeHits                     atomic.Int64
}

func (t *topicSeries) published(msgs, bytes int) {
	t.pubs.Add(1)
	t.msgs.Add(int64(msgs))
	t.bytes.Add(int64(bytes))
}

func (t *topicSeries) delivered(msgs, bytes int) {
	t.dmsgs.Add(int64(msgs))
	t.dbts.Add(int64(bytes))
}

func (t *topicSeries) counters() TopicCounters {
	return TopicCounters{Publishes: t.pubs.Load(), Messages: t.msgs.Load(), Bytes: t.bytes.Load(),
		DelivMsgs: t.dmsgs.Load(), DelivBytes: t.dbts.Load(), DedupeHits: t.dedupeHits.Load()}
}

// topicSet caches topicSeries by raw topic name. Lookups are lock-free
// (sync.Map: read-mostly, stable keys); creation and deletion are serialised
// by mu so the label reference counts and the cap stay exact.
type topicSet struct {
	byName sync.Map // raw name → *topicSeries

	mu      sync.Mutex
	byLabel map[string]*labelRef
	max     int
	other   *topicSeries
}

// labelRef counts the raw names sharing one label value (names that differ
// only in invalid UTF-8 map to the same label).
type labelRef struct {
	s    *topicSeries
	refs int
}

var (
	descTopicPubs       = desc("topic_publishes_total", "Publish requests committed (pub and delay apply), by topic.", "topic")
	descTopicPubMsgs    = desc("topic_published_messages_total", "Messages published, by topic.", "topic")
	descTopicPubBytes   = desc("topic_published_bytes_total", "Record bytes published, by topic.", "topic")
	descTopicDelivMsgs  = desc("topic_delivered_messages_total", "Messages sent to subscribers, by topic.", "topic")
	descTopicDelivBytes = desc("topic_delivered_bytes_total", "Record bytes sent to subscribers, by topic.", "topic")
	descDedupeHits      = desc("dedupe_hits_total", "Pub and delay requests answered as duplicates of a message id in the dedupe window (not stored again), by topic.", "topic")
)

func newTopicSet(max int) *topicSet {
	return &topicSet{byLabel: map[string]*labelRef{}, max: max, other: &topicSeries{label: OtherTopicLabel}}
}

func (ts *topicSet) get(name string) *topicSeries {
	if v, ok := ts.byName.Load(name); ok {
		return v.(*topicSeries)
	}
	return ts.create(name)
}

func (ts *topicSet) getBytes(name []byte) *topicSeries {
	// The lookup key aliases name only for the duration of Load, which
	// keeps no reference to it; create copies it before storing.
	if v, ok := ts.byName.Load(unsafe.String(unsafe.SliceData(name), len(name))); ok {
		return v.(*topicSeries)
	}
	return ts.create(string(name))
}

func (ts *topicSet) create(name string) *topicSeries {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if v, ok := ts.byName.Load(name); ok {
		return v.(*topicSeries)
	}
	label := labelValue(name)
	ref := ts.byLabel[label]
	switch {
	case ref != nil:
		ref.refs++
	case len(ts.byLabel) >= ts.max:
		// Remember the overflow so later publishes take the fast path.
		ts.byName.Store(name, ts.other)
		return ts.other
	default:
		ref = &labelRef{s: &topicSeries{label: label}, refs: 1}
		ts.byLabel[label] = ref
	}
	ts.byName.Store(name, ref.s)
	return ref.s
}

func (ts *topicSet) drop(name string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	v, ok := ts.byName.LoadAndDelete(name)
	if !ok || v.(*topicSeries) == ts.other {
		return
	}
	label := v.(*topicSeries).label
	if ref := ts.byLabel[label]; ref != nil {
		if ref.refs--; ref.refs <= 0 {
			delete(ts.byLabel, label)
		}
	}
}

// counters returns the counters recorded for the raw topic name (shared
// with any name of the same label, or the overflow series).
func (ts *topicSet) counters(name string) (TopicCounters, bool) {
	v, ok := ts.byName.Load(name)
	if !ok {
		return TopicCounters{}, false
	}
	return v.(*topicSeries).counters(), true
}

// each calls fn with every label's counters, the overflow series included
// once something was recorded in it.
func (ts *topicSet) each(fn func(label string, c TopicCounters)) {
	ts.mu.Lock()
	series := make([]*topicSeries, 0, len(ts.byLabel)+1)
	for _, ref := range ts.byLabel {
		series = append(series, ref.s)
	}
	ts.mu.Unlock()
	for _, s := range series {
		fn(s.label, s.counters())
	}
	if c := ts.other.counters(); c != (TopicCounters{}) {
		fn(ts.other.label, c)
	}
}

func (ts *topicSet) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descTopicPubs, descTopicPubMsgs, descTopicPubBytes, descTopicDelivMsgs, descTopicDelivBytes, descDedupeHits} {
		ch <- d
	}
}

func (ts *topicSet) Collect(ch chan<- prometheus.Metric) {
	ts.mu.Lock()
	series := make([]*topicSeries, 0, len(ts.byLabel)+1)
	for _, ref := range ts.byLabel {
		series = append(series, ref.s)
	}
	ts.mu.Unlock()
	series = append(series, ts.other)
	for _, s := range series {
		c := s.counters()
		counter(ch, descTopicPubs, c.Publishes, s.label)
		counter(ch, descTopicPubMsgs, c.Messages, s.label)
		counter(ch, descTopicPubBytes, c.Bytes, s.label)
		counter(ch, descTopicDelivMsgs, c.DelivMsgs, s.label)
		counter(ch, descTopicDelivBytes, c.DelivBytes, s.label)
		counter(ch, descDedupeHits, c.DedupeHits, s.label)
	}
}

func counter(ch chan<- prometheus.Metric, d *prometheus.Desc, v int64, label string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), label)
}

// labelValue makes an arbitrary byte string a valid Prometheus label value.
func labelValue(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
