//go:build unix

package docrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/smssmq/smss/client"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// mirrorWait bounds how long a bridge may take to start and mirror one
// message: well under a second here, seconds on a loaded machine.
const mirrorWait = 30 * time.Second

// TestBridgeDocCommands runs the smss-bridge commands of docs/bridge.md
// against a master the test starts (the doc's block assumes one), a
// JetStream server for nats1:4222, a Kafka cluster of two brokers (kfake)
// for k1:9092,k2:9092, and config/bridge.yaml, completed with the master
// and the JetStream server, for /etc/smss/bridge.yaml. Each command runs
// until the messages its comment promises are on the target, and must
// then end cleanly on SIGINT.
func TestBridgeDocCommands(t *testing.T) {
	w := newWalk(t)
	w.install("smss-bridge", smsstest.Binary(t, "./cmd/smss-bridge"))
	w.startServers("docs/bridge.md: the master its commands follow", nil, "")
	master := "127.0.0.1:" + w.ports["12301"]

	ns, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(20 * time.Second) {
		t.Fatal("the NATS server is not ready")
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}

	kc, err := kfake.NewCluster(kfake.NumBrokers(2))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	brokers := kc.ListenAddrs()
	if len(brokers) != 2 {
		t.Fatalf("kfake listens on %v, want two brokers", brokers)
	}

	metrics := fmt.Sprintf("127.0.0.1:%d", smsstest.FreePort(t))
	w.standIn("nats1:4222", ns.Addr().String())
	w.standIn("k1:9092", brokers[0])
	w.standIn("k2:9092", brokers[1])
	w.standIn("127.0.0.1:9108", metrics)
	w.standIn("/etc/smss/bridge.yaml", filepath.Join(w.dir, "bridge.yaml"))
	w.writeFile("bridge.yaml", bridgeYAML(t, master, ns.ClientURL()))

	c, err := client.Dial(context.Background(), master, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	publish := func(topic string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		body := "docs/bridge.md " + topic
		if err := c.CreateTopic(ctx, topic); err != nil {
			t.Fatalf("create %s: %v", topic, err)
		}
		if err := c.Publish(ctx, topic, client.NewMessage([]byte(body))); err != nil {
			t.Fatalf("publish to %s: %v", topic, err)
		}
		return body
	}

	// What each command of the block does, in the block's order. A topic
	// the command must not mirror is published before one it must, so
	// that once the second is on the target the first has been passed
	// over: the bridge mirrors in binlog order.
	checks := []func(where string){
		// --topics 'order.*,audit' into JetStream.
		func(where string) {
			publish("report.x")
			for _, topic := range []string{"order.x", "audit"} {
				waitJetStream(t, js, where, "smss."+topic, publish(topic))
			}
			switch m, err := lastOnSubject(js, "smss.report.x"); {
			case err == nil:
				t.Fatalf("%s: report.x, which --topics leaves out, is in the stream: %q", where, m.Data)
			case !errors.Is(err, jetstream.ErrMsgNotFound):
				t.Fatalf("%s: subject smss.report.x of stream SMSS: %v", where, err)
			}
		},
		// --exclude 'tmp.*' into Kafka. The bridge creates a message's
		// Kafka topic before it produces the message, so smss.tmp.x would
		// exist before stock.x is sent.
		func(where string) {
			publish("tmp.x")
			waitKafka(t, brokers, where, "smss.stock.x", publish("stock.x"))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			adm := kadm.NewClient(kafkaClient(t, brokers))
			topics, err := adm.ListTopics(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if topics.Has("smss.tmp.x") {
				t.Fatalf("%s: tmp.x, which --exclude leaves out, has a Kafka topic", where)
			}
		},
		// The yaml file (JetStream, every topic) with metrics on the
		// stand-in for 127.0.0.1:9108.
		func(where string) {
			waitJetStream(t, js, where, "smss.ledger.x", publish("ledger.x"))
			url := "http://" + metrics + "/metrics"
			smsstest.WaitFor(t, mirrorWait, where+": smss_bridge_messages_total above 0 at "+url, func() bool {
				return mirroredCount(url) > 0
			})
		},
	}
	ran := 0
	w.serve("smss-bridge", func(where string, _ *smsstest.Proc) {
		if ran == len(checks) {
			t.Fatalf("%s: a bridge command more than the %d this test knows what to expect of", where, len(checks))
		}
		checks[ran](where)
		ran++
	})
	w.runFile("docs/bridge.md", len(checks))
	if ran != len(checks) {
		t.Fatalf("ran %d bridge commands of docs/bridge.md, want %d", ran, len(checks))
	}
}

// bridgeYAML is config/bridge.yaml, the documented defaults, with the
// master and a JetStream target set: the least a yaml file needs.
func bridgeYAML(t *testing.T, master, natsURL string) string {
	t.Helper()
	root, err := smsstest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "config", "bridge.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, r := range [][2]string{
		{"\nmaster: []\n", "\nmaster: [" + master + "]\n"},
		{"\n  url: \"\" ", "\n  url: " + natsURL + " "},
	} {
		if n := strings.Count(s, r[0]); n != 1 {
			t.Fatalf("config/bridge.yaml holds %q %d times, want once", strings.TrimSpace(r[0]), n)
		}
		s = strings.Replace(s, r[0], r[1], 1)
	}
	return s
}

func lastOnSubject(js jetstream.JetStream, subject string) (*jetstream.RawStreamMsg, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "SMSS")
	if err != nil {
		return nil, err
	}
	return st.GetLastMsgForSubject(ctx, subject)
}

// waitJetStream waits until stream SMSS holds body as the last message of
// subject.
func waitJetStream(t *testing.T, js jetstream.JetStream, where, subject, body string) {
	t.Helper()
	smsstest.WaitFor(t, mirrorWait, fmt.Sprintf("%s: %q on subject %s of stream SMSS", where, body, subject), func() bool {
		m, err := lastOnSubject(js, subject)
		return err == nil && string(m.Data) == body
	})
}

func kafkaClient(t *testing.T, brokers []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.MetadataMinAge(100 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// waitKafka waits until Kafka topic topic holds body, reading it from the
// start.
func waitKafka(t *testing.T, brokers []string, where, topic, body string) {
	t.Helper()
	cl := kafkaClient(t, brokers, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var seen []string
	smsstest.WaitFor(t, mirrorWait, fmt.Sprintf("%s: %q in Kafka topic %s", where, body, topic), func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { seen = append(seen, string(r.Value)) })
		for _, v := range seen {
			if v == body {
				return true
			}
		}
		return false
	})
}

var messagesTotal = regexp.MustCompile(`(?m)^smss_bridge_messages_total (\S+)$`)

// mirroredCount is smss_bridge_messages_total as the metrics endpoint url
// serves it, -1 if it does not.
func mirroredCount(url string) float64 {
	hc := http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get(url)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return -1
	}
	m := messagesTotal.FindSubmatch(b)
	if m == nil {
		return -1
	}
	n, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		return -1
	}
	return n
}
