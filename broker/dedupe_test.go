package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/metrics"
	"github.com/smssmq/smss/protocol"
)

// idRec is a record whose first header is the message id (when id is not
// empty), followed by an ordinary header, as a client would send it.
func idRec(id, body string) []byte {
	var hs []protocol.KV
	if id != "" {
		hs = append(hs, protocol.KV{Key: protocol.MsgIDHeader, Value: id})
	}
	hs = append(hs, protocol.KV{Key: "traceId", Value: "t-" + body})
	r, err := protocol.AppendRecord(nil, protocol.Record{Headers: hs, Body: []byte(body)})
	if err != nil {
		panic(err)
	}
	return r
}

// testClock is a settable Options.Now.
type testClock struct{ ms atomic.Int64 }

func newTestClock() *testClock {
	c := &testClock{}
	c.ms.Store(time.Now().UnixMilli())
	return c
}

func (c *testClock) now() int64          { return c.ms.Load() }
func (c *testClock) add(d time.Duration) { c.ms.Add(d.Milliseconds()) }
func (c *testClock) set(o *Options)      { o.Now = c.now }

func bodiesOf(recs [][]byte) []string {
	out := make([]string, 0, len(recs))
	for _, r := range recs {
		rec, _, err := protocol.ParseRecord(r)
		if err != nil {
			out = append(out, "?"+err.Error())
			continue
		}
		out = append(out, string(rec.Body))
	}
	return out
}

// dedupeStep is one request of a TestDedupeWindow case: wait advances the
// clock first; same names the step (by index) whose eventId a duplicate
// must get, -1 when the request must be stored anew.
type dedupeStep struct {
	wait   time.Duration
	op     string // "pub", "batch", "delay", "delete", "create"
	topic  string
	id     string
	body   string
	same   int
	errHas string
}

func TestDedupeWindow(t *testing.T) {
	const window = 2 * time.Minute
	cases := []struct {
		name   string
		maxIDs int
		steps  []dedupeStep
		// want are the bodies each topic holds at the end, in order.
		want map[string][]string
		hits int64 // dedupe hits on topic a
	}{
		{name: "duplicate inside the window is not stored", steps: []dedupeStep{
			{op: "pub", topic: "a", id: "id-1", body: "one", same: -1},
			{op: "pub", topic: "a", id: "id-1", body: "one", same: 0},
			{wait: window - time.Second, op: "pub", topic: "a", id: "id-1", body: "one", same: 0},
			{op: "pub", topic: "a", id: "id-2", body: "two", same: -1},
		}, want: map[string][]string{"a": {"one", "two"}}, hits: 2},
		{name: "outside the window it is stored again", steps: []dedupeStep{
			{op: "pub", topic: "a", id: "id-1", body: "one", same: -1},
			{wait: window + time.Second, op: "pub", topic: "a", id: "id-1", body: "one", same: -1},
			{op: "pub", topic: "a", id: "id-1", body: "one", same: 1},
		}, want: map[string][]string{"a": {"one", "one"}}, hits: 1},
		{name: "topics are independent", steps: []dedupeStep{
			{op: "pub", topic: "a", id: "x", body: "a1", same: -1},
			{op: "pub", topic: "b", id: "x", body: "b1", same: -1},
			{op: "pub", topic: "b", id: "x", body: "b1", same: 1},
			{op: "pub", topic: "a", id: "x", body: "a1", same: 0},
		}, want: map[string][]string{"a": {"a1"}, "b": {"b1"}}, hits: 1},
		{name: "requests without an id are always stored", steps: []dedupeStep{
			{op: "pub", topic: "a", body: "n", same: -1},
			{op: "pub", topic: "a", body: "n", same: -1},
		}, want: map[string][]string{"a": {"n", "n"}}},
		{name: "a batch dedupes on its first record's id", steps: []dedupeStep{
			{op: "batch", topic: "a", id: "b-1", body: "x", same: -1},
			{op: "batch", topic: "a", id: "b-1", body: "x", same: 0},
			{op: "pub", topic: "a", id: "b-1-second", body: "x", same: -1},
		}, want: map[string][]string{"a": {"x", "x-2", "x"}}, hits: 1},
		{name: "maxIds evicts the oldest id", maxIDs: 2, steps: []dedupeStep{
			{op: "pub", topic: "a", id: "1", body: "1", same: -1},
			{op: "pub", topic: "b", id: "2", body: "2", same: -1},
			{op: "pub", topic: "a", id: "3", body: "3", same: -1},
			{op: "pub", topic: "a", id: "1", body: "1", same: -1},
			{op: "pub", topic: "a", id: "3", body: "3", same: 2},
		}, want: map[string][]string{"a": {"1", "3", "1"}, "b": {"2"}}, hits: 1},
		{name: "deleting a topic drops its ids", steps: []dedupeStep{
			{op: "pub", topic: "a", id: "d", body: "old", same: -1},
			{op: "delete", topic: "a"},
			{op: "create", topic: "a"},
			{op: "pub", topic: "a", id: "d", body: "new", same: -1},
			{op: "pub", topic: "a", id: "d", body: "new", same: 3},
		}, want: map[string][]string{"a": {"new"}}, hits: 1},
		{name: "delay dedupes on the id, shared with pub", steps: []dedupeStep{
			{op: "delay", topic: "a", id: "dl", body: "later", same: -1},
			{op: "delay", topic: "a", id: "dl", body: "later", same: 0},
			{op: "pub", topic: "a", id: "dl", body: "later", same: 0},
		}, want: map[string][]string{"a": {}}, hits: 2},
		{name: "an empty or too long id is refused", steps: []dedupeStep{
			{op: "pub", topic: "a", id: "", body: "no id", same: -1},
			{op: "pub", topic: "a", id: strings.Repeat("i", 129), body: "x", errHas: "smss-msg-id must be 1 to 128 bytes, got 129"},
			{op: "delay", topic: "a", id: strings.Repeat("i", 129), body: "x", errHas: "smss-msg-id must be 1 to 128 bytes, got 129"},
			{op: "pub", topic: "a", id: strings.Repeat("i", 128), body: "max", same: -1},
		}, want: map[string][]string{"a": {"no id", "max"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			clk := newTestClock()
			m := metrics.NewWithOptions(metrics.Options{NoRuntime: true})
			b := openTest(t, dir, func(o *Options) {
				clk.set(o)
				o.DedupeWindow, o.DedupeMaxIDs, o.Metrics = window, tc.maxIDs, m
			})
			for _, name := range []string{"a", "b"} {
				if _, err := b.CreateTopic(ctx, []byte(name), 0); err != nil {
					t.Fatal(err)
				}
			}
			ids := make([]int64, len(tc.steps))
			for i, st := range tc.steps {
				clk.add(st.wait)
				var err error
				switch st.op {
				case "pub":
					ids[i], err = b.Publish(ctx, []byte(st.topic), idRec(st.id, st.body), 1)
				case "batch":
					recs := append(idRec(st.id, st.body), idRec("", st.body+"-2")...)
					ids[i], err = b.Publish(ctx, []byte(st.topic), recs, 2)
				case "delay":
					ids[i], err = b.PublishDelay(ctx, []byte(st.topic), idRec(st.id, st.body), 1, 3_600_000)
				case "delete":
					_, err = b.DeleteTopic(ctx, []byte(st.topic))
					continue
				case "create":
					_, err = b.CreateTopic(ctx, []byte(st.topic), 0)
					continue
				}
				if st.errHas != "" {
					if err == nil || !strings.Contains(err.Error(), st.errHas) || !errors.Is(err, protocol.ErrInvalidMsgID) || !protocol.IsBizError(err) {
						t.Fatalf("step %d: error %v, want a business error containing %q", i, err, st.errHas)
					}
					continue
				}
				if err != nil {
					t.Fatalf("step %d (%s %s id %q): %v", i, st.op, st.topic, st.id, err)
				}
				if st.same >= 0 && ids[i] != ids[st.same] {
					t.Fatalf("step %d: eventId %d, want the original's %d (step %d)", i, ids[i], ids[st.same], st.same)
				}
				if st.same < 0 {
					for j := 0; j < i; j++ {
						if ids[j] == ids[i] {
							t.Fatalf("step %d: eventId %d of step %d: stored request answered as a duplicate", i, ids[i], j)
						}
					}
				}
			}
			if got, _ := m.TopicCounters("a"); got.DedupeHits != tc.hits {
				t.Errorf("dedupe hits on a: %d, want %d", got.DedupeHits, tc.hits)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			for name, want := range tc.want {
				_, recs := readTopic(t, dir, name)
				if got := bodiesOf(recs); strings.Join(got, ",") != strings.Join(want, ",") {
					t.Errorf("topic %s holds %q, want %q", name, got, want)
				}
			}
		})
	}
}

// blockWriter makes the writer hang in its next binlog write until the
// returned release is called, so that the commands submitted meanwhile
// queue and then form one group; with failAfter the binlog write after it
// fails once.
func blockWriter(f *faults, failAfter bool) (entered <-chan struct{}, release func()) {
	in, out := make(chan struct{}), make(chan struct{})
	writes := 0
	// Runs under f.mu, which guards writes.
	f.set(func(p string) bool {
		if !strings.Contains(p, "/binlog/") {
			return false
		}
		writes++
		switch {
		case writes == 1:
			close(in)
			<-out
		case writes == 2 && failAfter:
			return true
		}
		return false
	}, nil)
	return in, func() { close(out) }
}

// waitQueued waits until n commands are queued for the writer.
func waitQueued(t *testing.T, b *Broker, n int) {
	t.Helper()
	smsstest.WaitFor(t, countWait, fmt.Sprintf("%d queued commands", n), func() bool { return b.queued() >= n })
}

// A duplicate that arrives while its original is still in flight (queued
// with it into one group) waits for the original and gets its answer:
// its eventId when the group commits, its error when the group fails.
func TestDedupeInFlight(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprintf("groupFails=%v", fail), func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			f := &faults{}
			b := openTest(t, dir, func(o *Options) { o.OpenFile = f.open })
			for _, name := range []string{"a", "hold"} {
				if _, err := b.CreateTopic(ctx, []byte(name), 0); err != nil {
					t.Fatal(err)
				}
			}
			entered, release := blockWriter(f, fail)
			held := make(chan error, 1)
			go func() {
				_, err := b.Publish(ctx, []byte("hold"), rec("hold"), 1)
				held <- err
			}()
			<-entered
			const n = 8
			type result struct {
				id  int64
				err error
			}
			results := make(chan result, n)
			for i := 0; i < n; i++ {
				go func() {
					id, err := b.Publish(ctx, []byte("a"), idRec("same", "payload"), 1)
					results <- result{id, err}
				}()
			}
			waitQueued(t, b, n)
			release()
			if err := <-held; err != nil {
				t.Fatalf("held publish: %v", err)
			}
			var first result
			for i := 0; i < n; i++ {
				r := <-results
				if i == 0 {
					first = r
				}
				if r != first {
					t.Fatalf("duplicates answered differently: %+v and %+v", first, r)
				}
			}
			if fail && first.err == nil {
				t.Fatal("the failed group's duplicates succeeded")
			}
			if !fail && first.err != nil {
				t.Fatal(first.err)
			}
			f.set(nil, nil)
			// A retry after a failure is a new publish and is stored
			// once; after a success it is a duplicate.
			id, err := b.Publish(ctx, []byte("a"), idRec("same", "payload"), 1)
			if err != nil {
				t.Fatal(err)
			}
			if !fail && id != first.id {
				t.Fatalf("retry got eventId %d, want %d", id, first.id)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			if _, recs := readTopic(t, dir, "a"); len(recs) != 1 {
				t.Fatalf("topic a holds %d messages, want 1: %q", len(recs), bodiesOf(recs))
			}
		})
	}
}

// Many publishers racing with one id, some in one group, some after it
// committed: one message is stored and everybody gets its eventId.
func TestDedupeConcurrentSubmits(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	b := openTest(t, dir, nil)
	b.CreateTopic(ctx, []byte("a"), 0)
	const ids, per = 20, 6
	var wg sync.WaitGroup
	got := make([][]int64, ids)
	var mu sync.Mutex
	for i := 0; i < ids; i++ {
		for j := 0; j < per; j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id, err := b.Publish(ctx, []byte("a"), idRec(fmt.Sprintf("id-%d", i), fmt.Sprint(i)), 1)
				if err != nil {
					t.Error(err)
				}
				mu.Lock()
				got[i] = append(got[i], id)
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	for i, g := range got {
		for _, id := range g {
			if id != g[0] {
				t.Fatalf("id-%d answered with eventIds %v", i, g)
			}
		}
	}
	if n := b.DedupeIDs(); n != ids {
		t.Errorf("window holds %d ids, want %d", n, ids)
	}
	if n := b.ServerInfo().DedupeIDs; n != ids { // /api/info, smss_dedupe_ids
		t.Errorf("ServerInfo reports %d ids, want %d", n, ids)
	}
	b.Close()
	if _, recs := readTopic(t, dir, "a"); len(recs) != ids {
		t.Fatalf("topic holds %d messages, want %d", len(recs), ids)
	}
}

// A request with an id and the same request without it differ in nothing
// but the header: the record bytes are stored verbatim, in the binlog and
// the topic, and the blocks differ only in the eventId and the records.
func TestDedupeStoresTheSameBytes(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	clk := newTestClock()
	b := openTest(t, dir, clk.set)
	b.CreateTopic(ctx, []byte("a"), 0)
	with, without := idRec("0123456789abcdef0123456789abcdef", "body"), idRec("", "body")
	if _, err := b.Publish(ctx, []byte("a"), with, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Publish(ctx, []byte("a"), without, 1); err != nil {
		t.Fatal(err)
	}
	b.Close()
	_, recs := readTopic(t, dir, "a")
	if len(recs) != 2 || !bytes.Equal(recs[0], with) || !bytes.Equal(recs[1], without) {
		t.Fatalf("topic records %q, want %q and %q", recs, with, without)
	}
	var pubs []binlog.Block
	for _, blk := range readBinlog(t, dir) {
		if blk.Cmd == binlog.CmdPub {
			pubs = append(pubs, blk)
		}
	}
	if len(pubs) != 2 || !bytes.Equal(pubs[0].Payload, with) || !bytes.Equal(pubs[1].Payload, without) {
		t.Fatalf("binlog pub blocks %+v", pubs)
	}
	p0, p1 := pubs[0], pubs[1]
	p0.EventID, p0.Payload, p1.EventID, p1.Payload = 0, nil, 0, nil
	if fmt.Sprint(p0) != fmt.Sprint(p1) {
		t.Fatalf("blocks differ beyond eventId and records: %+v vs %+v", p0, p1)
	}
}

// The window survives a restart: it is rebuilt from the binlog (real
// files, real badger), reading only the tail files within the window.
func TestDedupeRebuildAfterRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	clk := newTestClock()
	logs := &lockedBuffer{}
	mod := func(o *Options) {
		clk.set(o)
		o.MaxLogSize = 2048 // many binlog files
		o.DedupeWindow = time.Minute
		o.Logger = slog.New(slog.NewTextHandler(logs, nil))
	}
	b := openTest(t, dir, mod)
	b.CreateTopic(ctx, []byte("a"), 0)
	b.CreateTopic(ctx, []byte("gone"), 0)
	orig := map[string]int64{}
	pub := func(b *Broker, topic, id string) int64 {
		t.Helper()
		eid, err := b.Publish(ctx, []byte(topic), idRec(id, "body of "+id+strings.Repeat(".", 100)), 1)
		if err != nil {
			t.Fatal(err)
		}
		return eid
	}
	for i := 0; i < 40; i++ {
		orig["old-"+fmt.Sprint(i)] = pub(b, "a", "old-"+fmt.Sprint(i))
	}
	clk.add(2 * time.Minute) // the old ids leave the window
	for i := 0; i < 40; i++ {
		orig["new-"+fmt.Sprint(i)] = pub(b, "a", "new-"+fmt.Sprint(i))
	}
	pub(b, "gone", "g")
	delay, err := b.PublishDelay(ctx, []byte("a"), idRec("delayed", "d"), 1, 1000)
	if err != nil {
		t.Fatal(err)
	}
	// The delay apply block carries the delay's records, id included: it
	// must not replace the delay's entry.
	due, err := b.meta.DueDelays(clk.now()+5000, 10)
	if err != nil || len(due) != 1 {
		t.Fatalf("due delays %v %v", due, err)
	}
	if id, err := b.ApplyDelay(ctx, due[0].Topic, due[0].Value); err != nil || id == 0 {
		t.Fatalf("apply delay: %d %v", id, err)
	}
	b.DeleteTopic(ctx, []byte("gone"))
	b.CreateTopic(ctx, []byte("gone"), 0)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	files := len(b.binlog.Files())
	if files < 4 {
		t.Fatalf("only %d binlog files", files)
	}

	clk.add(10 * time.Second)
	b = openTest(t, dir, mod)
	if n := b.DedupeIDs(); n != 41 {
		t.Errorf("rebuilt window holds %d ids, want 41 (40 pubs and a delay)", n)
	}
	if !strings.Contains(logs.String(), "dedupe window rebuilt") || strings.Contains(logs.String(), "from=0:0") {
		t.Errorf("rebuild log does not show a tail scan:\n%s", logs.String())
	}
	for i := 0; i < 40; i++ {
		id := "new-" + fmt.Sprint(i)
		if got := pub(b, "a", id); got != orig[id] {
			t.Fatalf("%s after restart: eventId %d, want the original's %d", id, got, orig[id])
		}
	}
	if got, err := b.PublishDelay(ctx, []byte("a"), idRec("delayed", "d"), 1, 1000); err != nil || got != delay {
		t.Fatalf("delay retry after restart: %d %v, want %d", got, err, delay)
	}
	pub(b, "a", "old-0") // outside the window: stored again
	pub(b, "gone", "g")  // the topic was deleted since: a new incarnation
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	_, recs := readTopic(t, dir, "a")
	if len(recs) != 82 {
		t.Fatalf("topic a holds %d messages, want 82 (80, the delayed one, old-0 again)", len(recs))
	}
	if _, recs := readTopic(t, dir, "gone"); len(recs) != 1 {
		t.Fatalf("recreated topic holds %d messages, want 1", len(recs))
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A slave keeps the window while it applies replicated blocks, so that
// once promoted it answers retries of what the old master stored. The
// delay apply block carries the delay's records (and id) and is not a
// new publication of that id.
func TestDedupeWindowOnSlave(t *testing.T) {
	ctx := context.Background()
	mdir, sdir := t.TempDir(), t.TempDir()
	m := openTest(t, mdir, nil)
	m.CreateTopic(ctx, []byte("a"), 0)
	orig := map[string]int64{}
	for i := 0; i < 10; i++ {
		id := fmt.Sprint("m-", i)
		eid, err := m.Publish(ctx, []byte("a"), idRec(id, id), 1)
		if err != nil {
			t.Fatal(err)
		}
		orig[id] = eid
	}
	d, err := m.PublishDelay(ctx, []byte("a"), idRec("delay", "later"), 1, 1000)
	if err != nil {
		t.Fatal(err)
	}
	orig["delay"] = d
	due, err := m.meta.DueDelays(time.Now().UnixMilli()+5000, 10)
	if err != nil || len(due) != 1 {
		t.Fatalf("due delays %v %v", due, err)
	}
	if id, err := m.ApplyDelay(ctx, due[0].Topic, due[0].Value); err != nil || id == 0 {
		t.Fatalf("apply delay: %d %v", id, err)
	}

	s := openTest(t, sdir, func(o *Options) { o.Slave = true })
	replicateAll(t, m, s, 0)
	if n := s.DedupeIDs(); n != 11 {
		t.Fatalf("slave window holds %d ids, want 11", n)
	}
	m.Close()
	// Promote in place (Broker.Promote, as smssctl promote does): the role
	// changes, nothing else runs (the window is the one the writer kept
	// while applying).
	if _, err := s.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	before, _ := readTopic(t, sdir, "a")
	for id, want := range orig {
		var got int64
		if id == "delay" {
			got, err = s.PublishDelay(ctx, []byte("a"), idRec(id, "later"), 1, 1000)
		} else {
			got, err = s.Publish(ctx, []byte("a"), idRec(id, id), 1)
		}
		if err != nil || got != want {
			t.Fatalf("retry of %s on the promoted slave: %d %v, want %d", id, got, err, want)
		}
	}
	if _, err := s.Publish(ctx, []byte("a"), idRec("fresh", "fresh"), 1); err != nil {
		t.Fatal(err)
	}
	s.Close()
	after, _ := readTopic(t, sdir, "a")
	if len(after) != len(before)+1 || len(before) != 11 {
		t.Fatalf("promoted slave's topic went from %d to %d messages, want 11 to 12", len(before), len(after))
	}
}

// The rebuild of a long window says where it is.
func TestDedupeRebuildProgressLog(t *testing.T) {
	old := dedupeProgressEvery
	dedupeProgressEvery = 0
	t.Cleanup(func() { dedupeProgressEvery = old })
	ctx := context.Background()
	dir := t.TempDir()
	b := openTest(t, dir, nil)
	b.CreateTopic(ctx, []byte("a"), 0)
	for i := 0; i < 600; i++ {
		b.Publish(ctx, []byte("a"), idRec(fmt.Sprint(i), "x"), 1)
	}
	b.Close()
	logs := &lockedBuffer{}
	b = openTest(t, dir, func(o *Options) { o.Logger = slog.New(slog.NewTextHandler(logs, nil)) })
	b.Close()
	if !strings.Contains(logs.String(), "rebuilding dedupe window from the binlog") {
		t.Fatalf("no progress line:\n%s", logs.String())
	}
}

// The eviction queue keeps order across chunk boundaries, reuses popped
// chunks and filters in order.
func TestIDQueue(t *testing.T) {
	for _, n := range []int{0, 1, idQueueChunk - 1, idQueueChunk, idQueueChunk + 1, 3*idQueueChunk + 7} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			var q idQueue
			push := func(from, to int) {
				for i := from; i < to; i++ {
					q.push(dedupeItem{eventID: int64(i)})
				}
			}
			push(0, n)
			popped := n / 2
			for i := 0; i < popped; i++ {
				if got := q.front().eventID; got != int64(i) {
					t.Fatalf("pop %d: eventId %d", i, got)
				}
				q.pop()
			}
			push(n, n+idQueueChunk+3)
			q.filter(func(it *dedupeItem) bool { return it.eventID%3 != 0 })
			want := []int64{}
			for i := popped; i < n+idQueueChunk+3; i++ {
				if i%3 != 0 {
					want = append(want, int64(i))
				}
			}
			if q.len() != len(want) {
				t.Fatalf("len %d, want %d", q.len(), len(want))
			}
			for i, w := range want {
				if got := q.front().eventID; got != w {
					t.Fatalf("item %d: eventId %d, want %d", i, got, w)
				}
				q.pop()
			}
			if q.len() != 0 || len(q.chunks) != 0 {
				t.Fatalf("empty queue keeps %d items in %d chunks", q.len(), len(q.chunks))
			}
			push(0, 2) // usable again
			if q.front().eventID != 0 || q.len() != 2 {
				t.Fatal("queue not usable after emptying")
			}
		})
	}
}

// Different ids have different keys, whatever form the key takes.
func TestIDKey(t *testing.T) {
	ids := []string{
		"a", "a\x00", "\x00", "0123456789abcdef", "0123456789abcdeF",
		"0123456789abcdef0", strings.Repeat("0", 32), strings.Repeat("0", 31) + "1",
		"0123456789abcdef0123456789abcdef", "0123456789ABCDEF0123456789abcdef",
		"0123456789abcdef0123456789abcdeg", strings.Repeat("x", 33), strings.Repeat("x", 128),
		strings.Repeat("x", 127) + "y", "\xfe", "\xff",
	}
	seen := map[idKey]string{}
	for _, id := range ids {
		k := makeIDKey([]byte(id))
		if k == (idKey{}) {
			t.Fatalf("%q has the zero key", id)
		}
		if other, ok := seen[k]; ok {
			t.Fatalf("%q and %q share a key", id, other)
		}
		seen[k] = id
		if makeIDKey([]byte(id)) != k {
			t.Fatalf("%q keyed twice differently", id)
		}
	}
	if k := makeIDKey([]byte("0123456789abcdef0123456789abcdef")); k.n != hexID {
		t.Fatalf("a Go client id is not decoded: %+v", k)
	}
	if a := testing.AllocsPerRun(100, func() { makeIDKey([]byte("0123456789abcdef0123456789abcdef")) }); a != 0 {
		t.Fatalf("makeIDKey allocates %v", a)
	}
}

// Deleting a topic frees its ids: the window's size and its queue drop
// them at once, not when they expire.
func TestDedupeDeleteFreesIDs(t *testing.T) {
	ctx := context.Background()
	b := openTest(t, t.TempDir(), nil)
	defer b.Close()
	for _, name := range []string{"a", "b"} {
		b.CreateTopic(ctx, []byte(name), 0)
		for i := 0; i < 5; i++ {
			if _, err := b.Publish(ctx, []byte(name), idRec(fmt.Sprint(name, i), "x"), 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := b.DedupeIDs(); n != 10 {
		t.Fatalf("window holds %d ids, want 10", n)
	}
	if _, err := b.DeleteTopic(ctx, []byte("a")); err != nil {
		t.Fatal(err)
	}
	if n := b.DedupeIDs(); n != 5 {
		t.Fatalf("after deleting a, the window holds %d ids, want 5", n)
	}
	// The writer is idle between requests: its queue is safe to read
	// through a command round trip (the create below).
	b.CreateTopic(ctx, []byte("c"), 0)
	if q := b.w.dd.fifo.len(); q != 5 {
		t.Fatalf("eviction queue holds %d items, want 5", q)
	}
}

// A rebuild keeps the newest dedupe.maxIds ids.
func TestDedupeRebuildKeepsNewest(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	b := openTest(t, dir, nil)
	b.CreateTopic(ctx, []byte("a"), 0)
	orig := make([]int64, 30)
	for i := range orig {
		id, err := b.Publish(ctx, []byte("a"), idRec(fmt.Sprint("id-", i), "x"), 1)
		if err != nil {
			t.Fatal(err)
		}
		orig[i] = id
	}
	b.Close()
	b = openTest(t, dir, func(o *Options) { o.DedupeMaxIDs = 10 })
	defer b.Close()
	if n := b.DedupeIDs(); n != 10 {
		t.Fatalf("rebuilt window holds %d ids, want 10", n)
	}
	if id, _ := b.Publish(ctx, []byte("a"), idRec("id-29", "x"), 1); id != orig[29] {
		t.Fatalf("newest id answered with %d, want the original %d", id, orig[29])
	}
	if id, _ := b.Publish(ctx, []byte("a"), idRec("id-19", "x"), 1); id == orig[19] {
		t.Fatal("an id beyond maxIds was still in the window")
	}
}
