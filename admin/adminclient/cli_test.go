package adminclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/smssmq/smss/admin/adminapi"
	"github.com/smssmq/smss/metrics"
	"github.com/smssmq/smss/metrics/metricstest"
)

func TestRunStats(t *testing.T) {
	e := newEnv(t, testToken)
	ctx := context.Background()
	var out bytes.Buffer
	if err := RunStats(ctx, &out, strings.TrimPrefix(e.base, "http://"), testToken, false); err != nil {
		t.Fatalf("RunStats: %v", err)
	}
	text := out.String()
	for _, want := range []string{
		"smss master 1.0.0", "last eventId 6000",
		"TOPICS  2 live, 1 expired, 1 deleted; 10.0 MiB on disk",
		"orders", "5000", "10.0 MiB", "expired", "deleted",
		"SUBSCRIBERS  3", "shipping", "1000",
		"REPLICATION  master, 1 slave(s)", "10.0.0.2:41000",
		"DELAYED  3 pending", "<=1m 1",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("stats output lacks %q:\n%s", want, text)
		}
	}
	// The subscriber with the largest lag is listed first.
	if strings.Index(text, "shipping") > strings.Index(text, "billing") {
		t.Errorf("subscribers not ordered by lag:\n%s", text)
	}

	out.Reset()
	if err := RunStats(ctx, &out, e.base, testToken, true); err != nil {
		t.Fatalf("RunStats json: %v", err)
	}
	var st Stats
	if err := json.Unmarshal(out.Bytes(), &st); err != nil {
		t.Fatalf("json output: %v\n%s", err, out.String())
	}
	if len(st.Topics) != 4 || len(st.Subscribers) != 3 || st.Info.Role != "master" || st.Delays.Pending != 3 {
		t.Errorf("json stats: %+v", st)
	}

	if err := RunStats(ctx, &out, e.base, "wrong", false); !errors.Is(err, ErrUnauthorized) {
		t.Errorf("wrong token: %v", err)
	}
	if err := RunStats(ctx, &out, "", "", false); err == nil {
		t.Error("empty address accepted")
	}
	if err := RunStats(ctx, &out, "ftp://x", "", false); err == nil {
		t.Error("ftp scheme accepted")
	}
}

func TestRunStatsSlaveAndHostileNames(t *testing.T) {
	e := newEnv(t, "")
	e.fake.Update(func(s *metricstest.State) {
		s.Replication = metrics.ReplicationInfo{Role: metrics.RoleSlave, Master: &metrics.MasterLink{
			Addr: "10.0.0.1:12301", State: metrics.LinkStreaming, Position: 77, LagEvents: -1, LagSeconds: 2.5}}
		s.Subscribers = []metrics.SubscriberInfo{{Topic: "orders", Who: "evil\x1b[2Jname", Lag: 1}}
	})
	var out bytes.Buffer
	if err := RunStats(context.Background(), &out, e.base, "", false); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	if !strings.Contains(text, "REPLICATION  slave of 10.0.0.1:12301  STREAMING  applied 77  lag 2.5s") {
		t.Errorf("slave line missing:\n%s", text)
	}
	if strings.Contains(text, "\x1b") {
		t.Errorf("escape sequence from a subscriber name reached the terminal:\n%q", text)
	}
}

// syncBuffer collects RunTop's frames while the test reads them.
type syncBuffer struct {
	mu     sync.Mutex
	b      bytes.Buffer
	frames chan struct{}
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case s.frames <- struct{}{}:
	default:
	}
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestRunTop(t *testing.T) {
	e := newEnv(t, testToken)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &syncBuffer{frames: make(chan struct{}, 16)}
	done := make(chan error, 1)
	go func() { done <- RunTop(ctx, out, e.base, testToken, 20*time.Millisecond) }()
	for i := range 3 {
		select {
		case <-out.frames:
		case err := <-done:
			t.Fatalf("RunTop ended after %d frames: %v", i, err)
		case <-time.After(5 * time.Second):
			t.Fatalf("frame %d not drawn", i)
		}
	}
	// Stopping the server shows the error in the frame and keeps going.
	ctxS, cancelS := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelS()
	if err := e.srv.Shutdown(ctxS); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(5 * time.Second)
	for !strings.Contains(out.String(), "retrying every") {
		select {
		case <-out.frames:
		case err := <-done:
			t.Fatalf("RunTop ended on a lost server: %v", err)
		case <-deadline:
			t.Fatalf("no error frame:\n%s", out.String())
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("RunTop after cancel: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("RunTop did not stop on cancel")
	}
	text := out.String()
	if n := strings.Count(text, clearScreen); n < 4 {
		t.Errorf("%d frames", n)
	}
	for _, want := range []string{"TOPICS", "IN/S", "orders", "SUBSCRIBERS", "REPLICATION", "DELAYED", "latency p50"} {
		if !strings.Contains(text, want) {
			t.Errorf("top output lacks %q", want)
		}
	}

	if err := RunTop(context.Background(), out, e.base, testToken, time.Second); err == nil {
		t.Error("RunTop against a stopped server returned nil")
	}
}

func TestHumanFormats(t *testing.T) {
	tests := []struct{ got, want string }{
		{humanCount(0), "0"}, {humanCount(12.34), "12.3"}, {humanCount(999), "999"},
		{humanCount(12345), "12.3k"}, {humanCount(2.5e6), "2.5M"},
		{humanBytes(512), "512 B"}, {humanBytes(1536), "1.5 KiB"}, {humanBytes(-1), "-"},
		{humanMs(-1), "-"}, {humanMs(0.25), "0.25ms"}, {humanMs(3.21), "3.2ms"}, {humanMs(42), "42ms"}, {humanMs(2500), "2.50s"},
		{humanDur(59 * time.Second), "59s"}, {humanDur(61 * time.Minute), "1h1m"}, {humanDur(49 * time.Hour), "2d1h"},
		{humanInt(-1), "-"}, {clip("abcdef", 4), "abc…"}, {clip("a\x00b\xff", 10), "a?b?"},
	}
	for i, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("case %d: %q, want %q", i, tc.got, tc.want)
		}
	}
}

func TestTablesAreCapped(t *testing.T) {
	var topics []adminapi.TopicView
	var subs []metrics.SubscriberInfo
	for i := range 20 {
		name := "t" + strings.Repeat("x", i)
		topics = append(topics, adminapi.TopicView{Status: metrics.TopicStateNormal})
		topics[i].Name = name
		subs = append(subs, metrics.SubscriberInfo{Topic: name, Who: "w"})
	}
	var b bytes.Buffer
	renderTopicTable(&b, topics, map[string]adminapi.TopicRate{"txxx": {MsgsPerSec: 5}}, 15, time.Now())
	renderSubscriberTable(&b, subs, len(subs), 10)
	text := b.String()
	if !strings.Contains(text, "… 5 more") || !strings.Contains(text, "… 10 more") {
		t.Fatalf("caps not reported:\n%s", text)
	}
	// The busiest topic comes first in top's table.
	lines := strings.Split(text, "\n")
	if !strings.HasPrefix(lines[2], "txxx ") {
		t.Fatalf("busiest topic not first: %q", lines[2])
	}
}

// TestRenderSemiSync: smssctl stats shows the semi-sync state and which
// slaves confirm.
func TestRenderSemiSync(t *testing.T) {
	now := time.Now()
	r := metrics.ReplicationInfo{Role: metrics.RoleMaster, LastEventID: 90,
		Slaves: []metrics.SlaveInfo{
			{RemoteAddr: "10.0.0.2:41000", Position: 90, Confirming: true, Confirmed: 88, Fsynced: true, ConfirmLatencySeconds: 0.0012},
			{RemoteAddr: "10.0.0.3:41000", Position: 80, LagEvents: 10},
		},
		Sync: &metrics.SyncInfo{SyncSlaves: 1, TimeoutMs: 300, OnTimeout: "degrade", Confirming: 1, Confirmed: 88, Waiting: 2,
			Degraded: true, DegradedSince: now.Add(-5 * time.Second).UnixMilli(), TimeoutsDegrade: 3}}
	var b bytes.Buffer
	renderReplication(&b, r, now)
	text := b.String()
	for _, want := range []string{"semi-sync: 1 slave(s) within 300 ms (degrade), DEGRADED", "confirmed up to 88", "2 writes waiting",
		"timeouts 0 fail / 3 degrade", "CONFIRMED", "88 (1.2 ms) fsynced"} {
		if !strings.Contains(text, want) {
			t.Errorf("lacks %q:\n%s", want, text)
		}
	}
	if line := text[strings.Index(text, "10.0.0.3:41000"):]; !strings.HasSuffix(strings.TrimSpace(strings.SplitN(line, "\n", 2)[0]), " -") {
		t.Errorf("a non-confirming slave shows a confirmation:\n%s", text)
	}
}
