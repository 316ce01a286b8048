package bridge

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smssmq/smss/internal/smsstest"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestKafkaUnknownOutcomeNotRetried: when the broker closes the connection
// of a produce request without answering (as a SIGKILLed broker does), the
// request's outcome is unknown. The ack fails, and the session's client
// must not send the request again on a new connection while the session is
// being torn down: a broker that lost the producer's sequence state (kfake
// restarted after a SIGKILL) stores such a retry a second time, next to
// the copy it already had (e2e/bridge TestBridgeKafkaTarget/sigkill found these
// duplicates: same producer id, same batch timestamp, twice).
func TestKafkaUnknownOutcomeNotRetried(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cutAt int64 // the produce request the broker drops (1-based)
	}{
		{"first produce", 1},
		{"after acked produces", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startKafka(t)
			var produces atomic.Int64
			c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				if produces.Add(1) == tc.cutAt {
					// Handled with an error: kfake closes the connection
					// without an answer.
					return nil, errors.New("connection cut"), true
				}
				return nil, nil, false
			})
			cfg := testConfig("placeholder:1").Kafka
			cfg.Brokers = c.ListenAddrs()
			tg := NewKafkaTarget(cfg)
			ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
			defer cancel()
			if err := tg.Open(ctx); err != nil {
				t.Fatal(err)
			}
			defer tg.Close()
			for i := int64(1); i <= tc.cutAt; i++ {
				m := &Message{Topic: "orders", EventID: i, Timestamp: time.Now().UnixMilli(),
					Block: Mark{EventID: i, BlockFirst: i}, Body: []byte(fmt.Sprintf("m%d", i))}
				ack, err := tg.Publish(ctx, m)
				if err != nil {
					t.Fatal(err)
				}
				err = ack.Wait(ctx)
				switch {
				case i < tc.cutAt && err != nil:
					t.Fatalf("message %d: %v", i, err)
				case i == tc.cutAt && err == nil:
					t.Fatalf("message %d: acked although the broker dropped its request", i)
				}
			}
			// franz-go retries the request on a new connection by itself:
			// it must find none (refused) rather than reach the broker.
			smsstest.WaitFor(t, testDeadline, "a retry of the dropped request or a refused connection", func() bool {
				return produces.Load() > tc.cutAt || tg.sess.refused.Load() > 0
			})
			if n := produces.Load(); n != tc.cutAt {
				t.Fatalf("the broker got %d produce requests after the dropped one: the request with an unknown outcome was retried", n-tc.cutAt)
			}
		})
	}
}
