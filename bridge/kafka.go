package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/smssmq/smss/protocol"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// KafkaTarget mirrors into Kafka with an idempotent producer and acks=all.
// Each Kafka partition is a lane named "<topic>/<partition>". The
// partition of a message is Kafka's default for its key (murmur2, as the
// Java client), and the key is the smss topic name, or the value of
// kafka.keyHeader when the message has that header.
type KafkaTarget struct {
	cfg KafkaConfig

	cl   *kgo.Client
	adm  *kadm.Client
	sess *kafkaSession
	prev *kafkaSession // the last closed session, until it is drained
	log  *slog.Logger

	mu         sync.Mutex
	partitions map[string]int32 // Kafka topic -> partition count
}

// NewKafkaTarget returns a target for cfg; it connects in Open.
func NewKafkaTarget(cfg KafkaConfig) *KafkaTarget {
	return &KafkaTarget{cfg: cfg}
}

// Describe implements Target.
func (t *KafkaTarget) Describe() string {
	if t.cfg.TopicMode == TopicModeSingle {
		return fmt.Sprintf("Kafka topic %s at %s", t.cfg.Topic, strings.Join(t.cfg.Brokers, ","))
	}
	return fmt.Sprintf("Kafka topics %s* at %s", t.cfg.TopicPrefix, strings.Join(t.cfg.Brokers, ","))
}

// KafkaTopic returns the Kafka topic an smss topic is mirrored to. In
// per-topic mode it is the prefix and the topic with every byte outside
// [a-zA-Z0-9._-] replaced by '_' (cut to Kafka's 249 bytes); the exact
// smss name is always in the smss-topic header.
func (t *KafkaTarget) KafkaTopic(topic string) string {
	if t.cfg.TopicMode == TopicModeSingle {
		return t.cfg.Topic
	}
	b := []byte(t.cfg.TopicPrefix + topic)
	for i := len(t.cfg.TopicPrefix); i < len(b); i++ {
		if !kafkaNameOK(string(b[i : i+1])) {
			b[i] = '_'
		}
	}
	if len(b) > 249 {
		b = b[:249]
	}
	return string(b)
}

// kafkaSession is what one session's producer shares with its hook.
type kafkaSession struct {
	lost chan struct{} // closed when a produce request's outcome is unknown
	once sync.Once

	dialer  net.Dialer
	refused atomic.Int64   // connections refused after lost (for tests)
	conns   sync.WaitGroup // connections not yet drained (kafka_drain.go)
}

// errSessionLost is what the session's dialer answers once a produce
// request's outcome is unknown.
var errSessionLost = errors.New("a produce request of this Kafka session has an unknown outcome: no new connections")

// dial is the session client's dialer. Once lost is closed it connects
// nowhere: franz-go retries the failed produce request by itself on a new
// connection, and it would do so in the moments before the session has
// torn down and closed the client. Such a retry lands on a broker that
// may have forgotten the producer's sequence numbers (kfake after a
// SIGKILL keeps them only across a clean shutdown), which then stores the
// records twice - while the next session's resume may even have read the
// tails already. Refusing the connection makes the retry fail instead:
// only the resume decides what is sent again. The hook closes lost
// before franz-go sees the error, so no retry can dial ahead of it.
func (s *kafkaSession) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	select {
	case <-s.lost:
		s.refused.Add(1)
		return nil, errSessionLost
	default:
	}
	nc, err := s.dialer.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return nc, nil // not TCP (never with kgo's dialer): nothing to half-close
	}
	s.conns.Add(1)
	return &drainConn{TCPConn: tc, sess: s}, nil
}

// produceKey is the Kafka API key of Produce requests.
const produceKey = 0

// OnBrokerWrite and OnBrokerRead implement kgo.HookBrokerWrite and
// kgo.HookBrokerRead. A produce request whose write or response read
// failed (the connection closed, the broker died) has an unknown outcome:
// it ends the session (the acks still waiting fail) and the session's
// client dials no more (see dial), instead of leaving its records to
// franz-go's retries on the next connection. Such a retry
// is deduplicated only by a broker that kept its producer state, which a
// restarted broker may not have (kfake after a SIGKILL does not: e2e/bridge
// TestBridgeKafkaTarget/sigkill found records duplicated that way). The
// resume then reads what the partitions hold instead.
func (s *kafkaSession) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	s.failed(key, err)
}

func (s *kafkaSession) OnBrokerRead(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	s.failed(key, err)
}

func (s *kafkaSession) failed(key int16, err error) {
	if key == produceKey && err != nil {
		s.once.Do(func() { close(s.lost) })
	}
}

// kafkaAck is the outcome of one produced record.
type kafkaAck struct {
	ch   chanAck
	lost <-chan struct{}
}

// Ready implements readyAck.
func (a kafkaAck) Ready() (bool, error) { return a.ch.Ready() }

func (a kafkaAck) Wait(ctx context.Context) error {
	select {
	case err := <-a.ch:
		return err
	case <-a.lost:
		// An ack that arrived just before the loss still counts.
		if done, err := a.ch.Ready(); done {
			return err
		}
		return errors.New("a produce request to Kafka failed on its connection; its outcome is unknown")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Open implements Target. Every session gets a new producer (and so a new
// producer id): what the previous one left in flight is settled by the
// resume, not by the producer's sequence numbers.
func (t *KafkaTarget) Open(ctx context.Context) error {
	if t.prev != nil {
		// Before anything of this session reaches the broker (kafka_drain.go).
		if err := t.prev.drained(ctx, t.logger()); err != nil {
			return fmt.Errorf("wait for the previous session's connections: %w", err)
		}
		t.prev = nil
	}
	sess := &kafkaSession{lost: make(chan struct{}), dialer: net.Dialer{Timeout: 10 * time.Second}} // kgo's default dial timeout
	cl, err := kgo.NewClient(
		kgo.WithHooks(sess),
		kgo.Dialer(sess.dial),
		kgo.SeedBrokers(t.cfg.Brokers...),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.MaxBufferedRecords(t.cfg.MaxInFlight),
		kgo.RecordDeliveryTimeout(ms(t.cfg.AckTimeoutMs)),
		kgo.ProducerLinger(2*time.Millisecond),
		// A topic created by the bridge is produced to at once: its
		// metadata must not wait for the default 5 s refresh floor.
		kgo.MetadataMinAge(200*time.Millisecond),
		kgo.ClientID("smss-bridge"),
	)
	if err != nil {
		return err
	}
	t.cl, t.adm, t.sess = cl, kadm.NewClient(cl), sess
	t.partitions = map[string]int32{}
	if t.cfg.TopicMode == TopicModeSingle {
		if _, err := t.partitionCount(ctx, t.cfg.Topic); err != nil {
			t.Close()
			return err
		}
	}
	return nil
}

// Close implements Target.
func (t *KafkaTarget) Close() {
	if t.cl != nil {
		t.cl.Close()
		t.cl = nil
		t.prev = t.sess
	}
}

// useLogger implements loggerUser: the bridge hands its logger over.
func (t *KafkaTarget) useLogger(l *slog.Logger) { t.log = l }

func (t *KafkaTarget) logger() *slog.Logger {
	if t.log != nil {
		return t.log
	}
	return slog.Default()
}

// partitionCount returns the partitions of a Kafka topic, creating the
// topic when allowed.
func (t *KafkaTarget) partitionCount(ctx context.Context, topic string) (int32, error) {
	t.mu.Lock()
	n, ok := t.partitions[topic]
	t.mu.Unlock()
	if ok {
		return n, nil
	}
	// Bounded like a publish: a broker that accepts connections but does
	// not answer (frozen, overloaded) must fail the session, which is then
	// retried with backoff, rather than hang it with nothing in flight
	// for the ack timeout to catch.
	ctx, cancel := context.WithTimeout(ctx, ms(t.cfg.AckTimeoutMs))
	defer cancel()
	for attempt := 0; ; attempt++ {
		td, err := t.adm.ListTopics(ctx, topic)
		if err != nil {
			return 0, fmt.Errorf("describe Kafka topic %s: %w", topic, err)
		}
		d, ok := td[topic]
		if ok && d.Err == nil && len(d.Partitions) > 0 {
			n = int32(len(d.Partitions))
			break
		}
		if ok && d.Err != nil && !errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
			return 0, fmt.Errorf("describe Kafka topic %s: %w", topic, d.Err)
		}
		if !t.cfg.CreateTopics {
			return 0, fmt.Errorf("Kafka topic %s does not exist (kafka.createTopics is off)", topic)
		}
		if attempt > 0 {
			return 0, fmt.Errorf("Kafka topic %s: created but not listed", topic)
		}
		resp, err := t.adm.CreateTopic(ctx, t.cfg.Partitions, t.cfg.ReplicationFactor, nil, topic)
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return 0, fmt.Errorf("create Kafka topic %s: %w", topic, err)
		}
		if err == nil && resp.NumPartitions > 0 {
			n = resp.NumPartitions
			break
		}
	}
	t.mu.Lock()
	t.partitions[topic] = n
	t.mu.Unlock()
	return n, nil
}

// key is the record key of m.
func (t *KafkaTarget) key(m *Message) []byte {
	if t.cfg.KeyHeader != "" {
		for _, h := range m.Headers {
			if h.Key == t.cfg.KeyHeader {
				return []byte(h.Value)
			}
		}
	}
	return []byte(m.Topic)
}

// Partition returns Kafka's default partition for key among n.
func Partition(key []byte, n int32) int32 {
	return (murmur2(key) & 0x7fffffff) % n
}

// murmur2 is Kafka's key hash (org.apache.kafka.common.utils.Utils.murmur2).
func murmur2(data []byte) int32 {
	const (
		seed uint32 = 0x9747b28c
		m    uint32 = 0x5bd1e995
		r           = 24
	)
	length := len(data)
	h := seed ^ uint32(length)
	for i := 0; i+4 <= length; i += 4 {
		k := uint32(data[i]) | uint32(data[i+1])<<8 | uint32(data[i+2])<<16 | uint32(data[i+3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	tail := length &^ 3
	switch length % 4 {
	case 3:
		h ^= uint32(data[tail+2]) << 16
		fallthrough
	case 2:
		h ^= uint32(data[tail+1]) << 8
		fallthrough
	case 1:
		h ^= uint32(data[tail])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int32(h)
}

// KafkaRecord builds the record of m without topic and partition
// (exported for tests and tools). Headers: the bridge's, then the
// message's own in order, byte for byte (HeaderRaw only when one of them
// uses a bridge header name).
func KafkaRecord(m *Message, key []byte) *kgo.Record {
	r := &kgo.Record{Key: key, Value: m.Body}
	hs := m.metaHeaders(len(m.Headers))
	if len(m.Headers) > 0 {
		if mapHeaders(m.Headers, false) {
			hs = append(hs, m.Headers...)
		} else {
			hs = append(hs, protocol.KV{Key: HeaderRaw, Value: RawHeaders(m.Headers)})
		}
	}
	// Every value is copied into one array: a []byte per header was most
	// of the allocations per message.
	size := 0
	for _, h := range hs {
		size += len(h.Value)
	}
	buf := make([]byte, 0, size)
	r.Headers = make([]kgo.RecordHeader, len(hs))
	for i, h := range hs {
		start := len(buf)
		buf = append(buf, h.Value...)
		r.Headers[i] = kgo.RecordHeader{Key: h.Key, Value: buf[start:len(buf):len(buf)]}
	}
	return r
}

// Publish implements Target.
func (t *KafkaTarget) Publish(ctx context.Context, m *Message) (Ack, error) {
	topic := t.KafkaTopic(m.Topic)
	n, err := t.partitionCount(ctx, topic)
	if err != nil {
		return nil, err
	}
	key := t.key(m)
	r := KafkaRecord(m, key)
	r.Topic, r.Partition = topic, Partition(key, n)
	ack := make(chanAck, 1)
	t.cl.Produce(ctx, r, func(_ *kgo.Record, err error) { ack <- err })
	return kafkaAck{ch: ack, lost: t.sess.lost}, nil
}

// TopicCreated implements Target: it creates the Kafka topic.
func (t *KafkaTarget) TopicCreated(ctx context.Context, topic string) error {
	_, err := t.partitionCount(ctx, t.KafkaTopic(topic))
	return err
}

func kafkaGet(r *kgo.Record) func(string) (string, bool) {
	return func(k string) (string, bool) {
		for _, h := range r.Headers {
			if h.Key == k {
				return string(h.Value), true
			}
		}
		return "", false
	}
}

func laneName(topic string, p int32) string { return topic + "/" + strconv.Itoa(int(p)) }

func splitLane(lane string) (string, int32, error) {
	i := strings.LastIndexByte(lane, '/')
	if i < 0 {
		return "", 0, fmt.Errorf("lane %q", lane)
	}
	p, err := strconv.ParseInt(lane[i+1:], 10, 32)
	if err != nil {
		return "", 0, fmt.Errorf("lane %q: %w", lane, err)
	}
	return lane[:i], int32(p), nil
}

// mirroredTopics lists the Kafka topics the bridge writes to.
func (t *KafkaTarget) mirroredTopics(ctx context.Context) ([]string, error) {
	if t.cfg.TopicMode == TopicModeSingle {
		return []string{t.cfg.Topic}, nil
	}
	td, err := t.adm.ListTopics(ctx)
	if err != nil {
		return nil, fmt.Errorf("list Kafka topics: %w", err)
	}
	var out []string
	for name := range td {
		if strings.HasPrefix(name, t.cfg.TopicPrefix) {
			out = append(out, name)
		}
	}
	return out, nil
}

// offsets returns the start and end offsets of every partition of topics.
func (t *KafkaTarget) offsets(ctx context.Context, topics []string) (map[string][2]int64, error) {
	out := map[string][2]int64{}
	if len(topics) == 0 {
		return out, nil
	}
	starts, err := t.adm.ListStartOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("list start offsets: %w", err)
	}
	ends, err := t.adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("list end offsets: %w", err)
	}
	var ferr error
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			if !errors.Is(o.Err, kerr.UnknownTopicOrPartition) {
				ferr = fmt.Errorf("end offset of %s/%d: %w", o.Topic, o.Partition, o.Err)
			}
			return
		}
		s, ok := starts.Lookup(o.Topic, o.Partition)
		if !ok || s.Err != nil {
			ferr = fmt.Errorf("start offset of %s/%d missing", o.Topic, o.Partition)
			return
		}
		out[laneName(o.Topic, o.Partition)] = [2]int64{s.Offset, o.Offset}
	})
	return out, ferr
}

// read returns the records of every lane in [from, to).
func (t *KafkaTarget) read(ctx context.Context, ranges map[string][2]int64) (map[string][]*kgo.Record, error) {
	out := map[string][]*kgo.Record{}
	parts := map[string]map[int32]kgo.Offset{}
	want := 0
	for lane, r := range ranges {
		if r[1] <= r[0] {
			continue
		}
		topic, p, err := splitLane(lane)
		if err != nil {
			return nil, err
		}
		if parts[topic] == nil {
			parts[topic] = map[int32]kgo.Offset{}
		}
		parts[topic][p] = kgo.NewOffset().At(r[0])
		want++
	}
	if want == 0 {
		return out, nil
	}
	// A range that can never be filled (records removed under us) must
	// not hang the resume: the session fails and is retried.
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(t.cfg.Brokers...), kgo.ConsumePartitions(parts),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()), kgo.ClientID("smss-bridge-resume"))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	done := map[string]bool{}
	for len(done) < want {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var ferr error
		fs.EachError(func(topic string, p int32, err error) {
			ferr = fmt.Errorf("fetch %s/%d: %w", topic, p, err)
		})
		if ferr != nil {
			return nil, ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			lane := laneName(r.Topic, r.Partition)
			rg := ranges[lane]
			if r.Offset >= rg[0] && r.Offset < rg[1] && !done[lane] {
				out[lane] = append(out[lane], r)
			}
			if r.Offset >= rg[1]-1 {
				done[lane] = true
			}
		})
	}
	return out, nil
}

// Marks implements Target: the last record of every partition of the
// mirrored Kafka topics.
func (t *KafkaTarget) Marks(ctx context.Context) (map[string]Mark, error) {
	topics, err := t.mirroredTopics(ctx)
	if err != nil {
		return nil, err
	}
	offs, err := t.offsets(ctx, topics)
	if err != nil {
		return nil, err
	}
	ranges := map[string][2]int64{}
	lost := 0
	for lane, o := range offs {
		switch {
		case o[1] > o[0]:
			ranges[lane] = [2]int64{o[1] - 1, o[1]}
		case o[1] > 0:
			lost++
		}
	}
	recs, err := t.read(ctx, ranges)
	if err != nil {
		return nil, err
	}
	marks := map[string]Mark{}
	for lane, rs := range recs {
		if len(rs) == 0 {
			continue
		}
		r := rs[len(rs)-1]
		m, ok, err := ParseMark(kafkaGet(r))
		if err != nil {
			return nil, fmt.Errorf("%s offset %d: %w", lane, r.Offset, err)
		}
		if !ok {
			return nil, fmt.Errorf("%w: %s offset %d has no %s header", ErrForeign, lane, r.Offset, HeaderEventID)
		}
		marks[lane] = m
	}
	if len(marks) == 0 && lost > 0 {
		return nil, fmt.Errorf("%w: %d partitions had records, all removed", ErrTargetLost, lost)
	}
	return marks, nil
}

// Tail implements Target.
func (t *KafkaTarget) Tail(ctx context.Context, lane string, after int64, limit int) ([]int64, error) {
	topic, _, err := splitLane(lane)
	if err != nil {
		return nil, err
	}
	offs, err := t.offsets(ctx, []string{topic})
	if err != nil {
		return nil, err
	}
	o, ok := offs[lane]
	if !ok {
		return nil, nil
	}
	recs, err := t.read(ctx, map[string][2]int64{lane: {max(o[0], o[1]-int64(limit)), o[1]}})
	if err != nil {
		return nil, err
	}
	var ids []int64
	for _, r := range recs[lane] {
		m, ok, err := ParseMark(kafkaGet(r))
		if err != nil {
			return nil, fmt.Errorf("%s offset %d: %w", lane, r.Offset, err)
		}
		if !ok {
			return nil, fmt.Errorf("%w: %s offset %d has no %s header", ErrForeign, lane, r.Offset, HeaderEventID)
		}
		if m.EventID > after {
			ids = append(ids, m.EventID)
		}
	}
	return ids, nil
}
