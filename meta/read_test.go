package meta

import (
	"bytes"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	badger "github.com/dgraph-io/badger/v4"
)

func TestDueDelays(t *testing.T) {
	s, _ := openTemp(t)
	type d struct {
		trigger, id int64
		topic       string
	}
	in := []d{{300, 5, "b"}, {100, 1, "a"}, {200, 3, "a"}, {200, 2, "c"}, {1000, 9, "a"}, {100, 4, "z"}}
	commit(t, s, func(b *Batch) {
		for _, x := range in {
			b.PutDelay(DelayKey(x.trigger, x.id, []byte(x.topic)), DelayValue(x.trigger, x.id, []byte("rec-"+x.topic)))
		}
	})
	// Key order: trigger BE, then id LE bytes (low byte first), then name.
	tests := []struct {
		now   int64
		limit int
		want  []d
	}{
		{99, 10, nil},
		{100, 10, []d{{100, 1, "a"}, {100, 4, "z"}}},
		{250, 10, []d{{100, 1, "a"}, {100, 4, "z"}, {200, 2, "c"}, {200, 3, "a"}}},
		{250, 3, []d{{100, 1, "a"}, {100, 4, "z"}, {200, 2, "c"}}},
		{5000, 20, []d{{100, 1, "a"}, {100, 4, "z"}, {200, 2, "c"}, {200, 3, "a"}, {300, 5, "b"}, {1000, 9, "a"}}},
		{5000, 0, nil},
	}
	for _, tc := range tests {
		got, err := s.DueDelays(tc.now, tc.limit)
		if err != nil {
			t.Fatal(err)
		}
		var gotD []d
		for _, e := range got {
			gotD = append(gotD, d{e.TriggerTime, e.DelayEventID, e.Topic})
			if want := DelayKey(e.TriggerTime, e.DelayEventID, []byte(e.Topic)); !bytes.Equal(e.Key, want) {
				t.Errorf("entry key %x, want %x", e.Key, want)
			}
			if want := DelayValue(e.TriggerTime, e.DelayEventID, []byte("rec-"+e.Topic)); !bytes.Equal(e.Value, want) {
				t.Errorf("entry value %x, want %x", e.Value, want)
			}
		}
		if !slices.Equal(gotD, tc.want) {
			t.Errorf("DueDelays(%d, %d) = %v, want %v", tc.now, tc.limit, gotD, tc.want)
		}
	}
	if at, ok, err := s.NextDelayTime(); err != nil || !ok || at != 100 {
		t.Fatalf("NextDelayTime = %d %v %v", at, ok, err)
	}
	key := DelayKey(100, 1, []byte("a"))
	if ok, err := s.HasDelay(key); err != nil || !ok {
		t.Fatalf("HasDelay = %v %v", ok, err)
	}
	commit(t, s, func(b *Batch) { b.DeleteDelay(key); b.DeleteDelay(DelayKey(100, 4, []byte("z"))) })
	if ok, err := s.HasDelay(key); err != nil || ok {
		t.Fatalf("HasDelay after delete = %v %v", ok, err)
	}
	if at, ok, err := s.NextDelayTime(); err != nil || !ok || at != 200 {
		t.Fatalf("NextDelayTime after delete = %d %v %v", at, ok, err)
	}
	if n, err := s.PendingDelays(); err != nil || n != 4 {
		t.Fatalf("PendingDelays = %d %v", n, err)
	}
}

// Malformed delay entries (not written by us) are skipped, never fatal.
func TestDueDelaysSkipsMalformed(t *testing.T) {
	var logs lockedBuffer
	s, err := Open(Options{Dir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	good := DelayKey(50, 1, []byte("ok"))
	commit(t, s, func(b *Batch) {
		b.PutDelay([]byte("delay@short"), []byte("x"))                     // key too short
		b.PutDelay(DelayKey(10, 1, []byte("bad")), DelayValue(11, 1, nil)) // value disagrees
		b.PutDelay(DelayKey(20, 1, []byte("tiny")), []byte{1, 2})          // value too short
		b.PutDelay(good, DelayValue(50, 1, []byte("r")))
	})
	got, err := s.DueDelays(100, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !bytes.Equal(got[0].Key, good) {
		t.Fatalf("DueDelays = %+v, want only the well-formed entry", got)
	}
	if n := strings.Count(logs.String(), "skipping delay entry"); n != 3 {
		t.Fatalf("%d skip warnings logged, want 3:\n%s", n, logs.String())
	}
	// A scheduler sleeping until NextDelayTime must not wake for entries
	// DueDelays will never return (it would spin on them).
	if at, ok, err := s.NextDelayTime(); err != nil || !ok || at != 50 {
		t.Fatalf("NextDelayTime = %d %v %v, want 50 (the only usable entry)", at, ok, err)
	}
	if n, err := s.PendingDelays(); err != nil || n != 1 {
		t.Fatalf("PendingDelays = %d %v, want 1", n, err)
	}
}

// lockedBuffer is a log sink that badger's goroutines may write to while the
// test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestExpiredTopics(t *testing.T) {
	s, _ := openTemp(t)
	if _, ok, err := s.NextExpiry(); ok || err != nil {
		t.Fatalf("NextExpiry on empty store = %v %v", ok, err)
	}
	commit(t, s, func(b *Batch) {
		b.PutTopic(&Topic{Name: "never"})
		b.PutTopic(&Topic{Name: "late", ExpireAt: 3000})
		b.PutTopic(&Topic{Name: "early", ExpireAt: 1000})
		b.PutTopic(&Topic{Name: "mid", ExpireAt: 2000})
		b.PutTopic(&Topic{Name: "mid2", ExpireAt: 2000})
	})
	tests := []struct {
		now  int64
		want []string
	}{
		{999, nil},
		{1000, []string{"early"}},
		{2500, []string{"early", "mid", "mid2"}},
		{1 << 50, []string{"early", "mid", "mid2", "late"}},
	}
	for _, tc := range tests {
		got, err := s.ExpiredTopics(tc.now)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("ExpiredTopics(%d) = %q, want %q", tc.now, got, tc.want)
		}
	}
	if at, ok, err := s.NextExpiry(); err != nil || !ok || at != 1000 {
		t.Fatalf("NextExpiry = %d %v %v", at, ok, err)
	}
}

// lf@ entries that index no topic (or another expireAt) are ignored, so the
// lifecycle job never retries a delete that cannot clear them.
func TestExpiredTopicsSkipsStaleLifetimes(t *testing.T) {
	s, _ := openTemp(t)
	commit(t, s, func(b *Batch) {
		b.PutTopic(&Topic{Name: "live", ExpireAt: 400})
		b.PutTopic(&Topic{Name: "moved", ExpireAt: 900})
	})
	err := s.db.Update(func(txn *badger.Txn) error {
		for _, k := range [][]byte{
			LifeKey(100, []byte("orphan")), // no norm@
			LifeKey(200, []byte("moved")),  // norm@ says 900
			[]byte("lf@short"),             // malformed
		} {
			if err := txn.Set(k, []byte{0}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.ExpiredTopics(1000); err != nil || !slices.Equal(got, []string{"live", "moved"}) {
		t.Fatalf("ExpiredTopics = %q %v", got, err)
	}
	if at, ok, err := s.NextExpiry(); err != nil || !ok || at != 400 {
		t.Fatalf("NextExpiry = %d %v %v, want 400", at, ok, err)
	}
}

func TestRoleAndCheckpoint(t *testing.T) {
	s, _ := openTemp(t)
	if _, ok, err := s.Role(); ok || err != nil {
		t.Fatalf("Role on empty store = %v %v", ok, err)
	}
	if _, ok, err := s.Checkpoint(); ok || err != nil {
		t.Fatalf("Checkpoint on empty store = %v %v", ok, err)
	}
	c := Checkpoint{BinlogFileID: 7, BinlogOffset: 1 << 33, NextEventID: 123456789}
	commit(t, s, func(b *Batch) { b.SetRole(RoleSlave); b.SetCheckpoint(c) })
	if r, ok, err := s.Role(); err != nil || !ok || r != RoleSlave {
		t.Fatalf("Role = %d %v %v", r, ok, err)
	}
	if got, ok, err := s.Checkpoint(); err != nil || !ok || got != c {
		t.Fatalf("Checkpoint = %+v %v %v", got, ok, err)
	}
	if v, _ := raw(t, s, []byte("smss@checkpoint")); !bytes.Equal(v, encodeCheckpoint(c)) {
		t.Fatalf("checkpoint bytes %x", v)
	}
}

func TestMalformedMetaIsAnError(t *testing.T) {
	s, _ := openTemp(t)
	err := s.db.Update(func(txn *badger.Txn) error {
		for k, v := range map[string][]byte{"norm@bad": {1, 2, 3}, "global@role": {0, 0}, "smss@checkpoint": {1}} {
			if err := txn.Set([]byte(k), v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Topics(); !errors.Is(err, ErrMalformed) {
		t.Errorf("Topics err %v", err)
	}
	if _, _, err := s.Topic("bad"); !errors.Is(err, ErrMalformed) {
		t.Errorf("Topic err %v", err)
	}
	if _, _, err := s.Role(); !errors.Is(err, ErrMalformed) {
		t.Errorf("Role err %v", err)
	}
	if _, _, err := s.Checkpoint(); !errors.Is(err, ErrMalformed) {
		t.Errorf("Checkpoint err %v", err)
	}
}

func TestEpoch(t *testing.T) {
	s, _ := openTemp(t)
	if e, err := s.Epoch(); e != 0 || err != nil {
		t.Fatalf("Epoch on empty store = %d %v", e, err)
	}
	for _, e := range []uint64{1, 7, 1 << 63} {
		commit(t, s, func(b *Batch) { b.SetEpoch(e) })
		if got, err := s.Epoch(); got != e || err != nil {
			t.Fatalf("Epoch = %d %v, want %d", got, err, e)
		}
	}
	if v, _ := raw(t, s, []byte("smss@epoch")); !bytes.Equal(v, []byte{0, 0, 0, 0, 0, 0, 0, 0x80}) {
		t.Fatalf("epoch bytes %x", v)
	}
	if err := s.db.Update(func(txn *badger.Txn) error { return txn.Set([]byte("smss@epoch"), []byte{1}) }); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Epoch(); !errors.Is(err, ErrMalformed) {
		t.Fatalf("short epoch value: %v", err)
	}
}
