package queue

import (
	"context"
	"testing"
	"time"

	"github.com/smssmq/smss/protocol"
)

// TestGroupReadsEveryStoredMessage: a group from the oldest message of a
// topic filled by large batches hands out every message, one at a time.
func TestGroupReadsEveryStoredMessage(t *testing.T) {
	b := openBroker(t, t.TempDir())
	defer b.Close()
	ctx := context.Background()
	if _, err := b.CreateTopic(ctx, []byte("bulk"), 0); err != nil {
		t.Fatal(err)
	}
	const batches, per = 4, 500
	for i := 0; i < batches; i++ {
		var recs []byte
		for j := 0; j < per; j++ {
			recs, _ = protocol.AppendRecord(recs, protocol.Record{Body: make([]byte, 200)})
		}
		if _, err := b.Publish(ctx, []byte("bulk"), recs, per); err != nil {
			t.Fatal(err)
		}
	}
	m := startManager(t, b)
	defer m.Stop()
	if _, err := m.Create(ctx, "bulk", protocol.QueueConfig{Group: "g", From: "oldest", MaxInFlight: 100000, MaxInFlightGroup: 100000}); err != nil {
		t.Fatal(err)
	}
	c, err := m.Join("bulk", "g", "w", "", 1)
	if err != nil {
		t.Fatal(err)
	}
	r := &recv{t: t, c: c}
	start := time.Now()
	seen := map[int64]bool{}
	for len(seen) < batches*per {
		ms := r.want(1, 10*time.Second)
		seen[ms[0].EventID] = true
		c.Outcomes([]protocol.QueueOutcome{{Op: protocol.QueueOpAck, EventID: ms[0].EventID}})
	}
	t.Logf("%d messages one at a time in %v", len(seen), time.Since(start))
}
