package meta

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func openAt(t testing.TB, dir string) *Store {
	t.Helper()
	s, err := Open(Options{Dir: dir, Logger: quietLogger()})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func openTemp(t testing.TB) (*Store, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "meta")
	s := openAt(t, dir)
	t.Cleanup(func() { _ = s.Close() })
	return s, dir
}

func commit(t testing.TB, s *Store, fill func(b *Batch)) {
	t.Helper()
	b := s.NewBatch()
	fill(b)
	if err := s.Commit(b); err != nil {
		t.Fatalf("Commit: %v", err)
	}
}

// raw returns the stored bytes of key, bypassing the Store API.
func raw(t testing.TB, s *Store, key []byte) ([]byte, bool) {
	t.Helper()
	var v []byte
	err := s.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(key)
		if err != nil {
			return err
		}
		v, err = item.ValueCopy(nil)
		return err
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, false
	}
	if err != nil {
		t.Fatalf("raw get %q: %v", key, err)
	}
	return v, true
}

// allKeys lists every key in the store in order.
func allKeys(t testing.TB, s *Store) []string {
	t.Helper()
	var keys []string
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			keys = append(keys, string(it.Item().Key()))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("list keys: %v", err)
	}
	return keys
}

// The bytes written through the API are exactly those of the original's dump.
func TestStoredBytesGolden(t *testing.T) {
	s, _ := openTemp(t)
	rec := appendixRecord(t)
	order := &Topic{Name: "order", CreateTime: 0x1a226fa68b1, CreateEventID: 1, StateChangeTime: 0x1a226fa68b1, StateChangeEventID: 1}
	life := &Topic{Name: "life1", CreateTime: 5, ExpireAt: 0x000001a226fddd19, CreateEventID: 2, StateChangeTime: 5, StateChangeEventID: 2}
	dkey := DelayKey(0x000001a22706d602, 20, []byte("order"))
	commit(t, s, func(b *Batch) {
		b.PutTopic(order)
		b.PutTopic(life)
		b.PutDelay(dkey, DelayValue(0x000001a22706d602, 20, rec))
		b.SetRole(RoleMaster)
	})
	want := map[string][]byte{
		"norm@order": unhex(t, "b168fa26a2010000 0000000000000000 0100000000000000 b168fa26a2010000 0100000000000000 00"),
		"lf@" + string(unhex(t, "000001a226fddd19")) + "life1":                     {0},
		"delay@" + string(unhex(t, "000001a22706d602 1400000000000000")) + "order": append(unhex(t, "02d60627a2010000 1400000000000000"), rec...),
		"global@role": {0},
		"norm@life1":  EncodeTopicValue(life),
	}
	keys := allKeys(t, s)
	if len(keys) != len(want) {
		t.Fatalf("stored keys %q, want %d keys", keys, len(want))
	}
	for k, v := range want {
		got, ok := raw(t, s, []byte(k))
		if !ok || !bytes.Equal(got, v) {
			t.Errorf("key %q = %x (present %v), want %x", k, got, ok, v)
		}
	}
	// A topic without a lifetime has no lf@ key: only life1's exists.
	for _, k := range keys {
		if strings.HasPrefix(k, "lf@") && !strings.HasSuffix(k, "life1") {
			t.Errorf("unexpected lifetime key %q", k)
		}
	}
}

func TestTopicsSortedByNameBytes(t *testing.T) {
	s, _ := openTemp(t)
	names := []string{"b", "a", "B", "ab", "a-b", "\u00e9t\u00e9", "Z9", "a.b", "aa"}
	commit(t, s, func(b *Batch) {
		for i, n := range names {
			b.PutTopic(&Topic{Name: n, CreateTime: int64(i), CreateEventID: int64(i + 1)})
		}
	})
	got, err := s.Topics()
	if err != nil {
		t.Fatal(err)
	}
	var gotNames []string
	for _, tp := range got {
		gotNames = append(gotNames, tp.Name)
		if want := int64(slices.Index(names, tp.Name) + 1); tp.CreateEventID != want {
			t.Errorf("%q: createEventId %d, want %d", tp.Name, tp.CreateEventID, want)
		}
	}
	want := slices.Clone(names)
	slices.Sort(want) // Go string order is byte order
	if !slices.Equal(gotNames, want) {
		t.Fatalf("Topics order %q, want %q", gotNames, want)
	}

	tp, ok, err := s.Topic("ab")
	if err != nil || !ok || tp.Name != "ab" || tp.CreateEventID != 4 {
		t.Fatalf("Topic(ab) = %+v %v %v", tp, ok, err)
	}
	if _, ok, err := s.Topic("missing"); ok || err != nil {
		t.Fatalf("Topic(missing) = %v %v", ok, err)
	}
}

func TestDeleteTopicRemovesBothKeys(t *testing.T) {
	s, _ := openTemp(t)
	keep := &Topic{Name: "keep", ExpireAt: 500}
	gone := &Topic{Name: "gone", ExpireAt: 300}
	plain := &Topic{Name: "plain"}
	commit(t, s, func(b *Batch) { b.PutTopic(keep); b.PutTopic(gone); b.PutTopic(plain) })
	commit(t, s, func(b *Batch) { b.DeleteTopic(gone); b.DeleteTopic(plain) })
	want := []string{string(LifeKey(500, []byte("keep"))), "norm@keep"}
	if got := allKeys(t, s); !slices.Equal(got, want) {
		t.Fatalf("keys after delete %q, want %q", got, want)
	}
	// Delete and re-create in one batch: the later change wins.
	commit(t, s, func(b *Batch) {
		b.DeleteTopic(keep)
		b.PutTopic(&Topic{Name: "keep", ExpireAt: 900, CreateEventID: 7})
	})
	tp, ok, err := s.Topic("keep")
	if err != nil || !ok || tp.ExpireAt != 900 || tp.CreateEventID != 7 {
		t.Fatalf("recreated topic = %+v %v %v", tp, ok, err)
	}
	if at, ok, err := s.NextExpiry(); err != nil || !ok || at != 900 {
		t.Fatalf("NextExpiry = %d %v %v, want 900", at, ok, err)
	}
}

func TestBatchAtomicity(t *testing.T) {
	s, _ := openTemp(t)
	commit(t, s, func(b *Batch) { b.PutTopic(&Topic{Name: "before"}) })
	before := allKeys(t, s)

	t.Run("too many entries", func(t *testing.T) {
		b := s.NewBatch()
		b.PutTopic(&Topic{Name: "first", ExpireAt: 10})
		b.DeleteTopic(&Topic{Name: "before"})
		b.SetCheckpoint(Checkpoint{1, 2, 3})
		for i := range 20000 {
			b.PutDelay(DelayKey(int64(i), int64(i), []byte("t")), DelayValue(int64(i), int64(i), []byte("r")))
		}
		if s.Fits(b) {
			t.Fatal("Fits accepted a batch badger refuses")
		}
		err := s.Commit(b)
		if !errors.Is(err, ErrBatchTooBig) {
			t.Fatalf("Commit err %v, want ErrBatchTooBig", err)
		}
	})
	t.Run("invalid key", func(t *testing.T) {
		b := s.NewBatch()
		b.PutTopic(&Topic{Name: "second"})
		b.DeleteTopic(&Topic{Name: "before"})
		b.DeleteDelay(nil) // badger refuses empty keys
		if err := s.Commit(b); err == nil || errors.Is(err, ErrBatchTooBig) {
			t.Fatalf("Commit err %v, want a key error", err)
		}
	})
	t.Run("too many value bytes", func(t *testing.T) {
		b := s.NewBatch()
		b.PutTopic(&Topic{Name: "third"})
		big := make([]byte, 8<<20)
		for i := 0; b.ValueBytes() <= MaxBatchValueBytes; i++ {
			b.PutDelay(DelayKey(1, int64(i), []byte("t")), big)
		}
		if s.Fits(b) {
			t.Fatal("Fits accepted an oversized batch")
		}
		if err := s.Commit(b); !errors.Is(err, ErrBatchTooBig) {
			t.Fatalf("Commit err %v, want ErrBatchTooBig", err)
		}
	})
	if after := allKeys(t, s); !slices.Equal(after, before) {
		t.Fatalf("failed commits changed the store: %q, want %q", after, before)
	}
}

// The writer relies on a few thousand small keys fitting in one batch.
func TestBatchCapacity(t *testing.T) {
	s, _ := openTemp(t)
	b := s.NewBatch()
	name := strings.Repeat("n", 123) // + 5 digits: longest valid topic name
	for i := range 3000 {
		n := []byte(fmt.Sprintf("%s%05d", name, i))
		b.PutDelay(DelayKey(int64(i), int64(i), n), DelayValue(int64(i), int64(i), make([]byte, 200)))
	}
	for i := range 2000 {
		b.PutTopic(&Topic{Name: fmt.Sprintf("%s%05d", name, i), ExpireAt: int64(i + 1)})
	}
	b.SetCheckpoint(Checkpoint{1, 2, 3})
	if !s.Fits(b) {
		t.Fatal("Fits refused 3000 delays + 2000 topics")
	}
	if err := s.Commit(b); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if n, err := s.PendingDelays(); err != nil || n != 3000 {
		t.Fatalf("PendingDelays = %d %v", n, err)
	}

	// Fits tracks badger's limit closely: grow until it says no, then the
	// commit of one entry less succeeds and the full one fails.
	b = s.NewBatch()
	for i := 0; ; i++ {
		b.PutDelay(DelayKey(int64(i), 1, []byte("grow")), DelayValue(int64(i), 1, make([]byte, 50)))
		if !s.Fits(b) {
			break
		}
	}
	if err := s.Commit(b); !errors.Is(err, ErrBatchTooBig) {
		t.Fatalf("commit of a batch Fits refused: %v", err)
	}
	b.ops = b.ops[:len(b.ops)-1]
	if err := s.Commit(b); err != nil {
		t.Fatalf("commit of the largest batch Fits accepted: %v", err)
	}
}

func TestBatchResetAndEmpty(t *testing.T) {
	s, _ := openTemp(t)
	b := s.NewBatch()
	if !b.Empty() {
		t.Fatal("new batch not empty")
	}
	if err := s.Commit(b); err != nil {
		t.Fatalf("empty commit: %v", err)
	}
	b.SetRole(RoleSlave)
	b.PutDelay([]byte("delay@k"), []byte("v"))
	if b.Empty() || b.Len() != 2 || b.ValueBytes() != 2 {
		t.Fatalf("batch Len %d ValueBytes %d", b.Len(), b.ValueBytes())
	}
	b.Reset()
	if !b.Empty() || b.ValueBytes() != 0 {
		t.Fatal("Reset left changes behind")
	}
	if err := s.Commit(b); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Role(); ok {
		t.Fatal("reset batch was committed")
	}
}

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

func TestReopenPersists(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "meta")
	s := openAt(t, dir)
	big := bytes.Repeat([]byte("payload-"), 1<<14) // 128 KiB: value-log resident
	dkey := DelayKey(77, 8, []byte("t1"))
	commit(t, s, func(b *Batch) {
		b.PutTopic(&Topic{Name: "t1", ExpireAt: 99, CreateEventID: 4})
		b.PutDelay(dkey, DelayValue(77, 8, big))
		b.SetRole(RoleMaster)
		b.SetCheckpoint(Checkpoint{1, 2, 3})
	})
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.Topics(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Topics after Close: %v", err)
	}
	if err := s.Commit(func() *Batch { b := s.NewBatch(); b.SetRole(1); return b }()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Commit after Close: %v", err)
	}

	s = openAt(t, dir)
	defer s.Close()
	checkReopened(t, s, dkey, DelayValue(77, 8, big))
}

func checkReopened(t *testing.T, s *Store, dkey, dval []byte) {
	t.Helper()
	tp, ok, err := s.Topic("t1")
	if err != nil || !ok || tp.ExpireAt != 99 || tp.CreateEventID != 4 {
		t.Fatalf("topic after reopen = %+v %v %v", tp, ok, err)
	}
	if names, err := s.ExpiredTopics(100); err != nil || !slices.Equal(names, []string{"t1"}) {
		t.Fatalf("ExpiredTopics after reopen = %q %v", names, err)
	}
	due, err := s.DueDelays(100, 5)
	if err != nil || len(due) != 1 || !bytes.Equal(due[0].Key, dkey) || !bytes.Equal(due[0].Value, dval) {
		t.Fatalf("DueDelays after reopen = %d entries, %v", len(due), err)
	}
	if r, ok, err := s.Role(); err != nil || !ok || r != RoleMaster {
		t.Fatalf("Role after reopen = %d %v %v", r, ok, err)
	}
	if c, ok, err := s.Checkpoint(); err != nil || !ok || c != (Checkpoint{1, 2, 3}) {
		t.Fatalf("Checkpoint after reopen = %+v %v %v", c, ok, err)
	}
}

// A committed batch survives SIGKILL of the process without Close or Sync:
// recovery depends on it. The child commits, reports, and waits to be killed.
func TestCommitSurvivesKill(t *testing.T) {
	if dir := os.Getenv("SMSS_META_KILL_CHILD"); dir != "" {
		s := openAt(t, dir)
		commit(t, s, func(b *Batch) {
			b.PutTopic(&Topic{Name: "t1", ExpireAt: 99, CreateEventID: 4})
			b.PutDelay(DelayKey(77, 8, []byte("t1")), DelayValue(77, 8, bytes.Repeat([]byte("k"), 4096)))
			b.SetRole(RoleMaster)
			b.SetCheckpoint(Checkpoint{1, 2, 3})
		})
		fmt.Println("committed")
		time.Sleep(time.Minute) // killed by the parent long before
		os.Exit(3)
	}
	if testing.Short() {
		t.Skip("spawns a child process")
	}
	dir := filepath.Join(t.TempDir(), "meta")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestCommitSurvivesKill$")
	cmd.Env = append(os.Environ(), "SMSS_META_KILL_CHILD="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 0, 64)
	for !bytes.Contains(buf, []byte("committed")) {
		chunk := make([]byte, 64)
		n, err := out.Read(chunk)
		buf = append(buf, chunk[:n]...)
		if err != nil {
			t.Fatalf("child ended before committing: %q, %v", buf, err)
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	s := openAt(t, dir)
	defer s.Close()
	checkReopened(t, s, DelayKey(77, 8, []byte("t1")), DelayValue(77, 8, bytes.Repeat([]byte("k"), 4096)))
}

func TestRunGCStopsOnCancelAndClose(t *testing.T) {
	s, _ := openTemp(t)
	for _, stop := range []string{"cancel", "close"} {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { s.RunGC(ctx, time.Millisecond); close(done) }()
		if stop == "cancel" {
			cancel()
		} else {
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("RunGC still running 10s after %s", stop)
		}
		cancel()
	}
}

func TestInMemory(t *testing.T) {
	s, err := Open(Options{InMemory: true, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	commit(t, s, func(b *Batch) { b.PutTopic(&Topic{Name: "x"}) })
	if ts, err := s.Topics(); err != nil || len(ts) != 1 {
		t.Fatalf("Topics = %v %v", ts, err)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Options{Logger: quietLogger()}); err == nil {
		t.Fatal("Open without Dir succeeded")
	}
}
