package metrics

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/smssmq/smss/protocol"
)

const namespace = "smss"

// Error kinds for Error. Callers may pass other constant strings; these are
// the ones whose series exist from the start (and so cost no allocation).
const (
	KindProtocol    = "protocol"    // malformed or oversized request; connection closed
	KindBusiness    = "business"    // 400 with a business error text
	KindIO          = "io"          // socket read/write failure
	KindTimeout     = "timeout"     // read, reply or ack deadline passed
	KindStorage     = "storage"     // a group commit failed and was rolled back
	KindFsync       = "fsync"       // fsync failed (fatal for the writer)
	KindReplication = "replication" // a replication session ended with an error
	KindDelay       = "delay"       // a delayed message could not be applied
	KindPanic       = "panic"       // a recovered panic
	KindRefused     = "refused"     // connection refused at accept (limit.maxConns)
)

var knownKinds = []string{KindProtocol, KindBusiness, KindIO, KindTimeout, KindStorage,
	KindFsync, KindReplication, KindDelay, KindPanic, KindRefused}

// Bucket layouts. Request latency spans an in-memory info (tens of µs) to a
// pub waiting for a group fsync on a slow disk (seconds).
var (
	LatencyBuckets    = []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
	FsyncBuckets      = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}
	GroupCmdBuckets   = prometheus.ExponentialBuckets(1, 2, 11)   // 1 … 1024
	GroupBytesBuckets = prometheus.ExponentialBuckets(256, 4, 10) // 256 B … 64 MiB
)

// Options tunes New. The zero value is fine.
type Options struct {
	// MaxTopics caps the per-topic counter series (default 10000).
	MaxTopics int
	// NoRuntime leaves out the Go runtime and process collectors.
	NoRuntime bool
}

// Metrics records smss's metrics. Create it with New; a nil *Metrics is a
// valid no-op receiver.
type Metrics struct {
	reg *prometheus.Registry

	// Indexed by command byte: every entry is set (unknown codes share the
	// "other" series), so the hot path is one array load.
	reqDur  [256]prometheus.Observer
	reqErr  [256]prometheus.Counter
	reqHist map[protocol.Command]prometheus.Metric // the distinct children, for Read

	topics *topicSet

	groupCmds  prometheus.Histogram
	groupBytes prometheus.Histogram
	fsync      prometheus.Histogram

	connsOpen  atomic.Int64
	connsTotal atomic.Int64

	errVec   *prometheus.CounterVec
	errKinds map[string]prometheus.Counter // read-only after New

	// Totals over all topics, kept as plain atomics so Read is cheap and
	// they survive TopicDeleted.
	pubs, pubMsgs, pubBytes, delMsgs, delBytes atomic.Int64

	source    atomic.Pointer[sourceBox]
	sourceErr atomic.Int64
}

type sourceBox struct{ s Source }

// commandLabels are the commands with their own series; any other code is
// "other".
var commandLabels = []protocol.Command{
	protocol.CmdSub, protocol.CmdPub, protocol.CmdCreate, protocol.CmdDelete,
	protocol.CmdDelay, protocol.CmdAlive, protocol.CmdReplica, protocol.CmdTopicInfo,
	protocol.CmdValidList, protocol.CmdList, protocol.CmdDelayApply,
}

// otherCommand stands for every code outside commandLabels in reqHist.
const otherCommand = protocol.Command(255)

// New returns a Metrics with its own registry.
func New() *Metrics { return NewWithOptions(Options{}) }

// NewWithOptions is New with tuning.
func NewWithOptions(o Options) *Metrics {
	if o.MaxTopics <= 0 {
		o.MaxTopics = 10000
	}
	m := &Metrics{reg: prometheus.NewRegistry(), reqHist: map[protocol.Command]prometheus.Metric{}}
	f := factory{m.reg}

	dur := f.histogramVec("request_duration_seconds",
		"Time from a request's header being read to its reply being written, by command (stream commands: until the stream starts).",
		LatencyBuckets, "command")
	rerr := f.counterVec("request_errors_total", "Requests answered with an error, by command.", "command")
	otherDur, otherErr := dur.WithLabelValues("other"), rerr.WithLabelValues("other")
	for i := range m.reqDur {
		m.reqDur[i], m.reqErr[i] = otherDur, otherErr
	}
	// A HistogramVec's children are Histograms (Observer and Metric); the
	// assertion holds by construction.
	m.reqHist[otherCommand] = otherDur.(prometheus.Metric)
	for _, c := range commandLabels {
		m.reqDur[c], m.reqErr[c] = dur.WithLabelValues(c.String()), rerr.WithLabelValues(c.String())
		m.reqHist[c] = m.reqDur[c].(prometheus.Metric)
	}

	m.topics = newTopicSet(o.MaxTopics)
	m.reg.MustRegister(m.topics)

	m.groupCmds = f.histogram("group_commit_commands", "Commands committed per writer group.", GroupCmdBuckets)
	m.groupBytes = f.histogram("group_commit_bytes", "Payload bytes committed per writer group.", GroupBytesBuckets)
	m.fsync = f.histogram("fsync_duration_seconds", "Duration of one durability flush (all files of a group, fsynced together).", FsyncBuckets)

	f.gaugeFunc("connections_open", "Client connections currently open.", func() float64 { return float64(m.connsOpen.Load()) })
	f.counterFunc("connections_total", "Client connections accepted.", func() float64 { return float64(m.connsTotal.Load()) })

	m.errVec = f.counterVec("errors_total", "Errors by kind.", "kind")
	m.errKinds = make(map[string]prometheus.Counter, len(knownKinds))
	for _, k := range knownKinds {
		m.errKinds[k] = m.errVec.WithLabelValues(k)
	}

	f.counterFunc("published_messages_total", "Messages published over all topics.", func() float64 { return float64(m.pubMsgs.Load()) })
	f.counterFunc("published_bytes_total", "Record bytes published over all topics.", func() float64 { return float64(m.pubBytes.Load()) })
	f.counterFunc("delivered_messages_total", "Messages sent to subscribers over all topics.", func() float64 { return float64(m.delMsgs.Load()) })
	f.counterFunc("delivered_bytes_total", "Record bytes sent to subscribers over all topics.", func() float64 { return float64(m.delBytes.Load()) })

	m.reg.MustRegister(&sourceCollector{m: m})
	if !o.NoRuntime {
		m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	return m
}

// Registry is the registry to serve (promhttp.HandlerFor) or to add more
// collectors to.
func (m *Metrics) Registry() *prometheus.Registry {
	if m == nil {
		return nil
	}
	return m.reg
}

// SetSource attaches the scrape-time state source; nil detaches it. It may
// be called after New because the broker that implements Source is usually
// created after the Metrics it records into.
func (m *Metrics) SetSource(s Source) {
	if m == nil {
		return
	}
	if s == nil {
		m.source.Store(nil)
		return
	}
	m.source.Store(&sourceBox{s})
}

// Source returns the attached Source, or nil.
func (m *Metrics) Source() Source {
	if m == nil {
		return nil
	}
	if b := m.source.Load(); b != nil {
		return b.s
	}
	return nil
}

// ObserveRequest records one request of command cmd that took d; ok is false
// when it was answered with an error (business or other). For sub and
// replica, d should end when the stream starts, not when it ends.
func (m *Metrics) ObserveRequest(cmd protocol.Command, d time.Duration, ok bool) {
	if m == nil {
		return
	}
	m.reqDur[cmd].Observe(d.Seconds())
	if !ok {
		m.reqErr[cmd].Inc()
	}
}

// Published records one committed pub (or delay apply) of msgs messages
// and bytes record bytes on topic.
func (m *Metrics) Published(topic string, msgs, bytes int) {
	if m == nil {
		return
	}
	m.pubs.Add(1)
	m.pubMsgs.Add(int64(msgs))
	m.pubBytes.Add(int64(bytes))
	m.topics.get(topic).published(msgs, bytes)
}

// PublishedBytes is Published for a topic name held as bytes; it does not
// allocate for a topic already seen.
func (m *Metrics) PublishedBytes(topic []byte, msgs, bytes int) {
	if m == nil {
		return
	}
	m.pubs.Add(1)
	m.pubMsgs.Add(int64(msgs))
	m.pubBytes.Add(int64(bytes))
	m.topics.getBytes(topic).published(msgs, bytes)
}

// Delivered records msgs messages of bytes record bytes sent to a
// subscriber of topic (one data frame).
func (m *Metrics) Delivered(topic string, msgs, bytes int) {
	if m == nil {
		return
	}
	m.delMsgs.Add(int64(msgs))
	m.delBytes.Add(int64(bytes))
	m.topics.get(topic).delivered(msgs, bytes)
}

// DeliveredBytes is Delivered for a topic name held as bytes.
func (m *Metrics) DeliveredBytes(topic []byte, msgs, bytes int) {
	if m == nil {
		return
	}
	m.delMsgs.Add(int64(msgs))
	m.delBytes.Add(int64(bytes))
	m.topics.getBytes(topic).delivered(msgs, bytes)
}

// DedupeHit records one pub or delay request on topic that was answered
// from the dedupe window (a duplicate message id) and not stored.
func (m *Metrics) DedupeHit(topic []byte) {
	if m == nil {
		return
	}
	m.topics.getBytes(topic).dedupeHits.Add(1)
}

// TopicDeleted drops topic's per-topic series (the all-topic totals keep
// their counts).
func (m *Metrics) TopicDeleted(topic string) {
	if m == nil {
		return
	}
	m.topics.drop(topic)
}

// TopicCounters returns the counters recorded for topic since its series
// was created; false when nothing was recorded for it. Topics beyond
// Options.MaxTopics share the OtherTopicLabel series.
func (m *Metrics) TopicCounters(topic string) (TopicCounters, bool) {
	if m == nil {
		return TopicCounters{}, false
	}
	return m.topics.counters(topic)
}

// EachTopic calls fn with the counters of every topic series, named by
// label value (the topic name with invalid UTF-8 replaced, or
// OtherTopicLabel for the topics beyond the cap).
func (m *Metrics) EachTopic(fn func(label string, c TopicCounters)) {
	if m == nil {
		return
	}
	m.topics.each(fn)
}

// ObserveGroup records one writer group commit of commands commands carrying
// bytes payload bytes.
func (m *Metrics) ObserveGroup(commands, bytes int) {
	if m == nil {
		return
	}
	m.groupCmds.Observe(float64(commands))
	m.groupBytes.Observe(float64(bytes))
}

// ObserveFsync records one durability flush that took d.
func (m *Metrics) ObserveFsync(d time.Duration) {
	if m == nil {
		return
	}
	m.fsync.Observe(d.Seconds())
}

// ConnOpened records an accepted client connection; pair it with ConnClosed.
func (m *Metrics) ConnOpened() {
	if m == nil {
		return
	}
	m.connsOpen.Add(1)
	m.connsTotal.Add(1)
}

// ConnClosed records a client connection ending.
func (m *Metrics) ConnClosed() {
	if m == nil {
		return
	}
	m.connsOpen.Add(-1)
}

// Error counts one error of kind (use the Kind constants).
func (m *Metrics) Error(kind string) {
	if m == nil {
		return
	}
	if c, ok := m.errKinds[kind]; ok {
		c.Inc()
		return
	}
	m.errVec.WithLabelValues(labelValue(kind)).Inc()
}

// factory registers every collector it makes on one registry under the smss
// namespace.
type factory struct{ reg *prometheus.Registry }

func (f factory) histogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	v := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: name, Help: help, Buckets: buckets}, labels)
	f.reg.MustRegister(v)
	return v
}

func (f factory) histogram(name, help string, buckets []float64) prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Name: name, Help: help, Buckets: buckets})
	f.reg.MustRegister(h)
	return h
}

func (f factory) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help}, labels)
	f.reg.MustRegister(v)
	return v
}

func (f factory) counterFunc(name, help string, fn func() float64) {
	f.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help}, fn))
}

func (f factory) gaugeFunc(name, help string, fn func() float64) {
	f.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help}, fn))
}
