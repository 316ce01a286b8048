package lifecycle

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/broker"
	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/segment"
	"github.com/smssmq/smss/topicblock"
)

var ctx = context.Background()

// clock is the wall clock plus an offset the test moves, or a frozen time.
type clock struct{ off, frozen atomic.Int64 }

func (c *clock) Now() int64 {
	if f := c.frozen.Load(); f != 0 {
		return f
	}
	return time.Now().UnixMilli() + c.off.Load()
}

func (c *clock) Set(ms int64) { c.frozen.Store(ms) }

func rec(body string) []byte {
	r, err := protocol.AppendRecord(nil, protocol.Record{Body: []byte(body)})
	if err != nil {
		panic(err)
	}
	return r
}

func openBroker(t testing.TB, dir string, clk *clock, mod func(*broker.Options)) *broker.Broker {
	t.Helper()
	o := broker.Options{Dir: dir, FlushLevel: 1}
	if clk != nil {
		o.Now = clk.Now
	}
	if mod != nil {
		mod(&o)
	}
	b, err := broker.Open(o)
	if err != nil {
		t.Fatalf("open broker: %v", err)
	}
	return b
}

func create(t testing.TB, b *broker.Broker, name string, expireAt int64) {
	t.Helper()
	if _, err := b.CreateTopic(ctx, []byte(name), expireAt); err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
}

func pub(t testing.TB, b *broker.Broker, name, body string) int64 {
	t.Helper()
	id, err := b.Publish(ctx, []byte(name), rec(body), 1)
	if err != nil {
		t.Fatalf("pub %s: %v", name, err)
	}
	return id
}

func exists(b *broker.Broker, name string) bool {
	_, err := b.Topic([]byte(name))
	return err == nil
}

func decodeBinlog(buf []byte) (int64, int64, int, error) {
	blk, n, err := binlog.DecodeBlock(buf)
	return blk.EventID, blk.EventID, n, err
}

func decodeTopic(buf []byte) (int64, int64, int, error) {
	blk, n, err := topicblock.DecodeBlock(buf)
	return blk.EventID, blk.EventID, n, err
}

// binlogBlocks reads the binlog of a closed data directory.
func binlogBlocks(t testing.TB, dir string) []binlog.Block {
	t.Helper()
	l, err := segment.Open(segment.Options{Dir: filepath.Join(dir, "binlog"), Decode: decodeBinlog})
	if err != nil {
		t.Fatal(err)
	}
	var out []binlog.Block
	if _, err := l.Scan(segment.Position{}, func(_ segment.Position, _, _ int64, raw []byte) error {
		blk, _, err := binlog.DecodeBlock(append([]byte(nil), raw...))
		out = append(out, blk)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func topicDir(dir, name string) string {
	return topicblock.Dir(filepath.Join(dir, "topic"), []byte(name), 10)
}

// fileTimes reads every file of a log directory on its own (not through
// the broker) and returns each file's newest message time.
func fileTimes(t testing.TB, logDir string, isBinlog bool) map[int64]int64 {
	t.Helper()
	dec := decodeTopic
	if isBinlog {
		dec = decodeBinlog
	}
	l, err := segment.Open(segment.Options{Dir: logDir, Decode: dec})
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64]int64{}
	_, err = l.Scan(segment.Position{FileID: firstFile(l)}, func(pos segment.Position, _, _ int64, raw []byte) error {
		var ts int64
		if isBinlog {
			blk, _, err := binlog.DecodeBlock(raw)
			if err != nil {
				return err
			}
			ts = blk.WriteTime
		} else {
			blk, _, err := topicblock.DecodeBlock(raw)
			if err != nil {
				return err
			}
			ts = blk.Ts
		}
		out[pos.FileID] = max(out[pos.FileID], ts)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func firstFile(l *segment.Log) int64 {
	if f := l.Files(); len(f) > 0 {
		return f[0]
	}
	return 0
}

// logBuffer collects log output for assertions.
type logBuffer struct {
	mu sync.Mutex
	sb strings.Builder
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sb.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sb.String()
}

func (b *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(b, nil)) }
