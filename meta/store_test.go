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
	long := strings.Repeat("n", 123) // + 5 digits: longest valid topic name
	b := s.NewBatch()
	for i := range 3000 { // 6000 keys
		b.PutTopic(&Topic{Name: fmt.Sprintf("%s%05d", long, i), ExpireAt: int64(i + 1)})
	}
	if !s.Fits(b) {
		t.Fatal("Fits refused 3000 topics with 128-byte names")
	}
	if err := s.Commit(b); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	b = s.NewBatch()
	for i := range 3000 { // 200-byte records stay in the tree
		n := []byte(fmt.Sprintf("topic-for-delays-%015d", i%50))
		b.PutDelay(DelayKey(int64(i), int64(i), n), DelayValue(int64(i), int64(i), make([]byte, 200)))
	}
	for i := range 1000 {
		b.PutTopic(&Topic{Name: fmt.Sprintf("short-%05d", i), ExpireAt: int64(i + 1)})
	}
	b.SetCheckpoint(Checkpoint{1, 2, 3})
	if !s.Fits(b) {
		t.Fatal("Fits refused 3000 small delays + 1000 topics")
	}
	if err := s.Commit(b); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	// Payloads of 8 MiB go to the value log and cost the batch only a
	// pointer; only MaxBatchValueBytes bounds them.
	b = s.NewBatch()
	big := make([]byte, 8<<20)
	for i := range 3 {
		b.PutDelay(DelayKey(1, int64(i), []byte("big")), DelayValue(1, int64(i), big))
	}
	if !s.Fits(b) {
		t.Fatal("Fits refused three 8 MiB delays")
	}
	if err := s.Commit(b); err != nil {
		t.Fatalf("Commit of three 8 MiB delays: %v", err)
	}
	if n, err := s.PendingDelays(); err != nil || n != 3003 {
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
			b.PutDelay(DelayKey(5000, 9, []byte("t1")), DelayValue(5000, 9, bytes.Repeat([]byte("v"), 100<<10))) // value log
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
	due, err := s.DueDelays(5000, 5)
	if err != nil || len(due) != 2 || !bytes.Equal(due[1].Value, DelayValue(5000, 9, bytes.Repeat([]byte("v"), 100<<10))) {
		t.Fatalf("value-log delay after kill: %d entries, %v", len(due), err)
	}
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
