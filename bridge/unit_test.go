package bridge

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/smssmq/smss/protocol"
)

func TestFilter(t *testing.T) {
	cases := []struct {
		include, exclude []string
		topic            string
		want             bool
	}{
		{nil, nil, "a", true},
		{[]string{"*"}, nil, "anything", true},
		{[]string{"order.*"}, nil, "order.created", true},
		{[]string{"order.*"}, nil, "order", false},
		{[]string{"order.*"}, nil, "orders", false},
		{[]string{"a", "b"}, nil, "b", true},
		{[]string{"a", "b"}, nil, "c", false},
		{[]string{"*"}, []string{"tmp.*"}, "tmp.x", false},
		{[]string{"*"}, []string{"tmp.*"}, "tmpx", true},
		{[]string{"order.*"}, []string{"order.secret"}, "order.secret", false},
	}
	for _, c := range cases {
		f, err := NewFilter(c.include, c.exclude)
		if err != nil {
			t.Fatal(err)
		}
		if got := f.Match(c.topic); got != c.want {
			t.Errorf("include %v exclude %v: Match(%q) = %v, want %v", c.include, c.exclude, c.topic, got, c.want)
		}
	}
	if _, err := NewFilter([]string{"a*b"}, nil); err == nil || !strings.Contains(err.Error(), "topics") {
		t.Errorf("a*b accepted: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	base := func() Config {
		c := DefaultConfig()
		c.Master = []string{"127.0.0.1:12301"}
		c.NATS.URL = "nats://127.0.0.1:4222"
		return c
	}
	cases := []struct {
		name string
		mod  func(*Config)
		key  string // "" = valid
	}{
		{"valid nats", func(c *Config) {}, ""},
		{"valid kafka", func(c *Config) { c.NATS.URL = ""; c.Kafka.Brokers = []string{"k:9092"} }, ""},
		{"no master", func(c *Config) { c.Master = nil }, "master"},
		{"bad master", func(c *Config) { c.Master = []string{"nohost"} }, "master"},
		{"no target", func(c *Config) { c.NATS.URL = "" }, "nats.url or kafka.brokers"},
		{"two targets", func(c *Config) { c.Kafka.Brokers = []string{"k:9092"} }, "one target per bridge"},
		{"identity", func(c *Config) { c.Identity = "a b" }, "identity"},
		{"from", func(c *Config) { c.From = -1 }, "from"},
		{"pattern", func(c *Config) { c.Exclude = []string{"*x"} }, "exclude"},
		{"stream", func(c *Config) { c.NATS.Stream = "a.b" }, "nats.stream"},
		{"prefix", func(c *Config) { c.NATS.SubjectPrefix = "a.>" }, "nats.subjectPrefix"},
		{"replicas", func(c *Config) { c.NATS.Replicas = 7 }, "nats.replicas"},
		{"inflight", func(c *Config) { c.NATS.MaxInFlight = 0 }, "nats.maxInFlight"},
		{"ack timeout", func(c *Config) { c.NATS.AckTimeoutMs = 1 }, "nats.ackTimeoutMs"},
		{"dup window", func(c *Config) { c.NATS.DuplicateWindowS = 0 }, "nats.duplicateWindowSec"},
		{"kafka mode", func(c *Config) { c.NATS.URL = ""; c.Kafka.Brokers = []string{"k:1"}; c.Kafka.TopicMode = "x" }, "kafka.topicMode"},
		{"kafka topic", func(c *Config) {
			c.NATS.URL = ""
			c.Kafka.Brokers = []string{"k:1"}
			c.Kafka.TopicMode = TopicModeSingle
			c.Kafka.Topic = "a b"
		}, "kafka.topic"},
		{"kafka partitions", func(c *Config) { c.NATS.URL = ""; c.Kafka.Brokers = []string{"k:1"}; c.Kafka.Partitions = 0 }, "kafka.partitions"},
		{"kafka rf", func(c *Config) { c.NATS.URL = ""; c.Kafka.Brokers = []string{"k:1"}; c.Kafka.ReplicationFactor = 0 }, "kafka.replicationFactor"},
		{"user without password", func(c *Config) { c.Source.User = "u" }, "source.user"},
		{"tls files without tls", func(c *Config) { c.Source.CA = "ca.pem" }, "source.useTLS"},
		{"backoff", func(c *Config) { c.Source.MaxBackoffMs = 1; c.Source.MinBackoffMs = 5 }, "source.minBackoffMs"},
		{"silence", func(c *Config) { c.Source.SilenceMs = 10 }, "source.silenceMs"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := base()
			c.mod(&cfg)
			err := cfg.Validate()
			if c.key == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.key) {
				t.Fatalf("error %v does not name %q", err, c.key)
			}
		})
	}
}

func TestSubject(t *testing.T) {
	cases := map[string]string{
		"orders":        "smss.orders",
		"order.created": "smss.order.created",
		".x":            "smss.%2Ex",
		"x.":            "smss.x%2E",
		"a..b":          "smss.a%2E%2Eb",
		"*":             "smss.%2A",
		">":             "smss.%3E",
		"a>b":           "smss.a%3Eb",
		"ünï":           "smss.%C3%BCn%C3%AF",
		"a%b":           "smss.a%25b",
	}
	for topic, want := range cases {
		if got := Subject("smss", topic); got != want {
			t.Errorf("Subject(%q) = %q, want %q", topic, got, want)
		}
	}
}

func TestKafkaTopicName(t *testing.T) {
	tg := NewKafkaTarget(KafkaConfig{TopicMode: TopicModePerTopic, TopicPrefix: "smss."})
	for topic, want := range map[string]string{"orders": "smss.orders", "a:b": "smss.a_b", "ünï": "smss.__n__", "a.b-c_d": "smss.a.b-c_d"} {
		if got := tg.KafkaTopic(topic); got != want {
			t.Errorf("KafkaTopic(%q) = %q, want %q", topic, got, want)
		}
	}
	long := strings.Repeat("x", 300)
	if got := tg.KafkaTopic(long); len(got) != 249 {
		t.Errorf("long topic mapped to %d bytes", len(got))
	}
}

// TestPartitionMatchesKafka: the partition is Kafka's default for the key
// (franz-go's sticky key partitioner hashes like the Java client).
func TestPartitionMatchesKafka(t *testing.T) {
	p := kgo.StickyKeyPartitioner(nil).ForTopic("t")
	for _, key := range []string{"", "a", "ab", "abc", "abcd", "orders", "order.created", strings.Repeat("k", 101)} {
		for _, n := range []int32{1, 3, 7, 64} {
			want := int32(p.Partition(&kgo.Record{Key: []byte(key)}, int(n)))
			if key == "" {
				continue // an empty key is "no key" for Kafka: sticky, not hashed
			}
			if got := Partition([]byte(key), n); got != want {
				t.Errorf("Partition(%q, %d) = %d, Kafka says %d", key, n, got, want)
			}
		}
	}
}

func TestParseMark(t *testing.T) {
	hdr := func(kv ...string) func(string) (string, bool) {
		return func(k string) (string, bool) {
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1], true
				}
			}
			return "", false
		}
	}
	cases := []struct {
		name   string
		get    func(string) (string, bool)
		want   Mark
		ok     bool
		hasErr bool
	}{
		{"foreign", hdr("x", "y"), Mark{}, false, false},
		{"good", hdr(HeaderEventID, "12", HeaderBlock, "10-0000abcd", HeaderSafe, "9"), Mark{12, 10, 0xabcd, 9}, true, false},
		{"safe zero", hdr(HeaderEventID, "1", HeaderBlock, "1-00000000", HeaderSafe, "0"), Mark{1, 1, 0, 0}, true, false},
		{"event zero", hdr(HeaderEventID, "0", HeaderBlock, "1-00000000", HeaderSafe, "0"), Mark{}, true, true},
		{"no block", hdr(HeaderEventID, "5", HeaderSafe, "0"), Mark{}, true, true},
		{"short crc", hdr(HeaderEventID, "5", HeaderBlock, "5-abc", HeaderSafe, "0"), Mark{}, true, true},
		{"block after event", hdr(HeaderEventID, "5", HeaderBlock, "6-00000000", HeaderSafe, "0"), Mark{}, true, true},
		{"safe inside block", hdr(HeaderEventID, "5", HeaderBlock, "4-00000000", HeaderSafe, "4"), Mark{}, true, true},
		{"no safe", hdr(HeaderEventID, "5", HeaderBlock, "4-00000000"), Mark{}, true, true},
	}
	for _, c := range cases {
		m, ok, err := ParseMark(c.get)
		if ok != c.ok || (err != nil) != c.hasErr || (err == nil && m != c.want) {
			t.Errorf("%s: got %+v %v %v", c.name, m, ok, err)
		}
	}
	// Round trip through the headers the bridge writes.
	msg := &Message{Topic: "t", EventID: 7, Block: Mark{EventID: 7, BlockFirst: 5, BlockCRC: 0xdeadbeef, Safe: 4}}
	kv := msg.MetaHeaders()
	m, ok, err := ParseMark(func(k string) (string, bool) {
		for _, h := range kv {
			if h.Key == k {
				return h.Value, true
			}
		}
		return "", false
	})
	if err != nil || !ok || m != msg.Block {
		t.Fatalf("round trip: %+v %v %v", m, ok, err)
	}
}

func TestRawHeaders(t *testing.T) {
	cases := [][]protocol.KV{
		nil,
		{{Key: "a", Value: "b"}},
		{{Key: "k", Value: "1"}, {Key: "k", Value: "2"}, {Key: "", Value: ""}, {Key: "bin\x00\r\n", Value: "\xff\xfe"}},
	}
	for _, hs := range cases {
		got, err := ParseRawHeaders(RawHeaders(hs))
		if err != nil {
			t.Fatal(err)
		}
		if !sameHeaders(got, hs, true) {
			t.Errorf("round trip %q = %q", hs, got)
		}
	}
	for _, bad := range []string{"!!", "", "AAAA", "AQAAAA=="} {
		if bad == "AAAA" {
			continue // zero headers: valid
		}
		if _, err := ParseRawHeaders(bad); err == nil {
			t.Errorf("ParseRawHeaders(%q) accepted", bad)
		}
	}
}

func TestMapHeaders(t *testing.T) {
	cases := []struct {
		h          []protocol.KV
		nats, kafk bool
	}{
		{[]protocol.KV{{Key: "traceId", Value: "x1"}}, true, true},
		{[]protocol.KV{{Key: "SMSS-EVENT-ID", Value: "1"}}, false, false},
		{[]protocol.KV{{Key: "a b", Value: "1"}}, false, true},
		{[]protocol.KV{{Key: "a:b", Value: "1"}}, false, true},
		{[]protocol.KV{{Key: "a", Value: "x\r\ny"}}, false, true},
		{[]protocol.KV{{Key: "a", Value: " x"}}, false, true},
		{[]protocol.KV{{Key: "", Value: "x"}}, false, true},
		{[]protocol.KV{{Key: "a", Value: ""}}, true, true},
	}
	for _, c := range cases {
		if got := mapHeaders(c.h, true); got != c.nats {
			t.Errorf("nats %q = %v", c.h, got)
		}
		if got := mapHeaders(c.h, false); got != c.kafk {
			t.Errorf("kafka %q = %v", c.h, got)
		}
	}
}

func FuzzParseRawHeaders(f *testing.F) {
	f.Add(RawHeaders([]protocol.KV{{Key: "a", Value: "b"}}))
	f.Add("AQAAAA==")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		hs, err := ParseRawHeaders(s)
		if err != nil {
			return
		}
		again, err := ParseRawHeaders(RawHeaders(hs))
		if err != nil || !sameHeaders(hs, again, true) {
			t.Fatalf("re-encoding %q: %v", s, err)
		}
	})
}

func FuzzParseMark(f *testing.F) {
	f.Add("12", "10-0000abcd", "9")
	f.Add("1", "1-00000000", "0")
	f.Add("x", "", "-1")
	f.Fuzz(func(t *testing.T, ev, blk, safe string) {
		get := func(k string) (string, bool) {
			switch k {
			case HeaderEventID:
				return ev, true
			case HeaderBlock:
				return blk, true
			case HeaderSafe:
				return safe, true
			}
			return "", false
		}
		m, ok, err := ParseMark(get)
		if !ok {
			t.Fatal("event id present but not ok")
		}
		if err != nil {
			return
		}
		if m.EventID < 1 || m.BlockFirst < 1 || m.BlockFirst > m.EventID || m.Safe < 0 || m.Safe >= m.BlockFirst {
			t.Fatalf("accepted an inconsistent mark %+v", m)
		}
	})
}

// TestShippedConfig: config/bridge.yaml loads and holds the defaults.
func TestShippedConfig(t *testing.T) {
	cfg, err := LoadConfig("../config/bridge.yaml")
	if err != nil {
		t.Fatal(err)
	}
	def := DefaultConfig()
	cfg.Master, def.Master = nil, nil
	cfg.Exclude, def.Exclude = nil, nil
	cfg.Kafka.Brokers, def.Kafka.Brokers = nil, nil
	if fmt.Sprintf("%+v", cfg) != fmt.Sprintf("%+v", def) {
		t.Fatalf("config/bridge.yaml differs from the defaults:\n%+v\n%+v", cfg, def)
	}
}

// TestBlockValue: smss-block is built without fmt; it must read exactly as
// "%d-%08x" did, since ParseMark and resumes of older runs read it.
func TestBlockValue(t *testing.T) {
	for _, tc := range []struct {
		first int64
		crc   uint32
	}{
		{1, 0}, {9, 0xf}, {10, 0xdeadbeef}, {123456789, 0x0000abcd}, {math.MaxInt64, 0xffffffff},
	} {
		if got, want := blockValue(tc.first, tc.crc), fmt.Sprintf("%d-%08x", tc.first, tc.crc); got != want {
			t.Errorf("blockValue(%d, %#x) = %q, want %q", tc.first, tc.crc, got, want)
		}
	}
}

// TestTargetHeaders: the NATS message and the Kafka record of a message
// carry the bridge's headers and the message's own, in order, with
// repeated keys kept (they share backing arrays, which must not leak
// values from one header into another).
func TestTargetHeaders(t *testing.T) {
	base := Message{Topic: "a.b", EventID: 42, Timestamp: 1700000000000,
		Block: Mark{EventID: 42, BlockFirst: 40, BlockCRC: 0xabc, Safe: 39}, Body: []byte("body")}
	for _, tc := range []struct {
		name    string
		headers []protocol.KV
		delay   int64
		raw     bool
	}{
		{name: "none"},
		{name: "one", headers: []protocol.KV{{Key: "traceId", Value: "t1"}}},
		{name: "repeated", headers: []protocol.KV{{Key: "k", Value: "v1"}, {Key: "x", Value: "y"}, {Key: "k", Value: "v2"}}},
		{name: "delayed", headers: []protocol.KV{{Key: "k", Value: "v"}}, delay: 7},
		{name: "reserved name", headers: []protocol.KV{{Key: "Smss-Topic", Value: "spoof"}}, raw: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := base
			m.Headers, m.DelayEventID = tc.headers, tc.delay
			meta := m.MetaHeaders()
			want := append([]protocol.KV(nil), meta...)
			if tc.raw {
				want = append(want, protocol.KV{Key: HeaderRaw, Value: RawHeaders(tc.headers)})
			} else {
				want = append(want, tc.headers...)
			}

			rec := KafkaRecord(&m, []byte("key"))
			var got []protocol.KV
			for _, h := range rec.Headers {
				got = append(got, protocol.KV{Key: h.Key, Value: string(h.Value)})
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("Kafka headers\n got %v\nwant %v", got, want)
			}

			msg := NATSMsg("smss", &m)
			if msg.Subject != "smss.a.b" || string(msg.Data) != "body" {
				t.Errorf("NATS subject %q data %q", msg.Subject, msg.Data)
			}
			wantN := map[string][]string{}
			for _, h := range want {
				wantN[h.Key] = append(wantN[h.Key], h.Value)
			}
			if fmt.Sprint(map[string][]string(msg.Header)) != fmt.Sprint(wantN) {
				t.Errorf("NATS headers\n got %v\nwant %v", msg.Header, wantN)
			}
			if tc.delay != 0 && msg.Header.Get(HeaderDelayEventID) != "7" {
				t.Errorf("delay header %q", msg.Header.Get(HeaderDelayEventID))
			}
		})
	}
}
