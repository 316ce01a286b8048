package replication

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/broker"
	"github.com/smssmq/smss/internal/smsstest"
	"github.com/smssmq/smss/protocol"
)

const testAlive = 200 * time.Millisecond

// forked builds the failover picture: A is a master, B its slave; then A
// takes writes B never gets (aTail), B is promoted and takes its own
// (bTail). It returns A's data dir (closed), B (open, a master) and the
// last eventId both share.
func forked(t *testing.T, common, aTail, bTail func(b *broker.Broker)) (string, *broker.Broker, string, int64) {
	t.Helper()
	aDir, bDir := t.TempDir(), t.TempDir()
	a := openBroker(t, aDir, false, nil)
	common(a)
	ms := serveMaster(t, a, "", MasterOptions{})
	b := openBroker(t, bDir, true, nil)
	s, stop := runSlave(t, b, SlaveOptions{MasterAddr: ms.addr})
	waitCaughtUp(t, s, a, 10*time.Second)
	stop()
	ms.stop()
	shared := a.LastEventID()
	aTail(a)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = openBroker(t, bDir, false, nil) // promoted by restart
	t.Cleanup(func() { b.Close() })
	bTail(b)
	return aDir, b, bDir, shared
}

func pubs(prefix string, n, perBlock int) func(b *broker.Broker) {
	return func(b *broker.Broker) {
		for i := 0; i < n; i++ {
			r, k := recs(prefix+strconv.Itoa(i), perBlock)
			if _, err := b.Publish(context.Background(), []byte("t"), r, k); err != nil {
				panic(err)
			}
		}
	}
}

func seq(fs ...func(b *broker.Broker)) func(b *broker.Broker) {
	return func(b *broker.Broker) {
		for _, f := range fs {
			f(b)
		}
	}
}

func createT(b *broker.Broker) {
	if _, err := b.CreateTopic(context.Background(), []byte("t"), 0); err != nil {
		panic(err)
	}
}

func nothing(*broker.Broker) {}

// TestDivergenceDetection: Check and the replication session against a
// real master, for the ways two binlogs part.
func TestDivergenceDetection(t *testing.T) {
	cases := []struct {
		name         string
		common       func(*broker.Broker)
		aTail, bTail func(*broker.Broker)
		diverged     bool
		maxProbes    int // expected bound of a search
	}{
		{name: "not diverged, master ahead", common: seq(createT, pubs("c", 5, 1)), aTail: nothing, bTail: pubs("b", 3, 2)},
		{name: "not diverged, same binlog", common: seq(createT, pubs("c", 5, 3)), aTail: nothing, bTail: nothing},
		{name: "not diverged, one block", common: createT, aTail: nothing, bTail: pubs("b", 2, 1)},
		{name: "slave ahead by 3 blocks", common: seq(createT, pubs("c", 5, 1)), aTail: pubs("a", 3, 1), bTail: nothing, diverged: true, maxProbes: 6},
		{name: "same length, different last block", common: seq(createT, pubs("c", 5, 1)), aTail: pubs("a", 1, 1), bTail: pubs("b", 1, 1), diverged: true, maxProbes: 3},
		{name: "different block boundaries", common: seq(createT, pubs("c", 4, 2)), aTail: pubs("a", 1, 3), bTail: pubs("b", 3, 1), diverged: true, maxProbes: 3},
		{name: "different boundaries, longer tails", common: seq(createT, pubs("c", 4, 2)), aTail: pubs("a", 7, 2), bTail: pubs("b", 5, 3), diverged: true, maxProbes: 10},
		{name: "long tails after a long history", common: seq(createT, pubs("c", 300, 1)), aTail: pubs("a", 150, 1), bTail: pubs("b", 100, 1), diverged: true, maxProbes: 20},
		{name: "diverged from the first block", common: nothing, aTail: seq(createT, pubs("a", 3, 1)), bTail: seq(createT, pubs("b", 3, 1)), diverged: true, maxProbes: 8},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			aDir, b, bDir, shared := forked(t, c.common, c.aTail, c.bTail)
			ms := serveMaster(t, b, "", MasterOptions{AliveInterval: testAlive})
			a := openBroker(t, aDir, true, nil)
			defer a.Close()
			localLast := a.LastEventID()
			aBin := binlogBytes(t, aDir)
			opts := SlaveOptions{MasterAddr: ms.addr, AliveInterval: testAlive, SilenceTimeout: 10 * time.Second, Logger: testLogger(t)}
			s, err := NewSlave(a, opts)
			if err != nil {
				t.Fatal(err)
			}
			err = s.Check(context.Background())
			var d *DivergenceError
			if !c.diverged {
				if err != nil {
					t.Fatalf("Check: %v", err)
				}
			} else {
				if !errors.As(err, &d) || !errors.Is(err, ErrDiverged) || !errors.Is(err, ErrStopped) {
					t.Fatalf("Check: %v, want a divergence", err)
				}
				if !d.Found || d.CommonLast != shared || d.FirstDiff != shared+1 || d.LocalLast != localLast {
					t.Fatalf("divergence %+v, want common prefix up to %d, local last %d", d, shared, localLast)
				}
				if d.Probes > c.maxProbes {
					t.Fatalf("%d probes, want at most %d", d.Probes, c.maxProbes)
				}
				// The binlog before At is exactly the shared history.
				bBin := binlogBytes(t, bDir)
				if n := commonPrefix(aBin, bBin); n < len(aBin) && d.At.Offset > 0 && int64(n) < d.At.Offset {
					t.Fatalf("common prefix %d bytes, At %s", n, d.At)
				}
				for _, want := range []string{strconv.FormatInt(localLast, 10), strconv.FormatInt(shared+1, 10), ms.addr, "-rejoin"} {
					if !strings.Contains(err.Error(), want) {
						t.Fatalf("error %q does not name %q", err, want)
					}
				}
			}
			// The session itself: it follows, or stops with the same error.
			s2, stop := runSlave(t, a, opts)
			if !c.diverged {
				waitCaughtUp(t, s2, b, 10*time.Second)
				stop()
				if !bytes.Equal(binlogBytes(t, aDir), binlogBytes(t, bDir)) {
					t.Fatal("the slave's binlog is not the master's")
				}
				return
			}
			smsstest.WaitFor(t, 20*time.Second, "replication to stop", func() bool { return s2.Status().State == StateStopped })
			if err := stop(); !errors.Is(err, ErrDiverged) {
				t.Fatalf("Run: %v, want ErrDiverged", err)
			}
			if st := s2.Status(); !strings.Contains(st.LastError, strconv.FormatInt(shared+1, 10)) || st.LastEventID != localLast {
				t.Fatalf("status %+v", st)
			}
			if !bytes.Equal(binlogBytes(t, aDir), aBin) {
				t.Fatal("a divergent slave applied blocks")
			}
		})
	}
}

// TestDivergenceAgainstOriginalMaster: an original master resolves a
// replica request only at a block's first eventId (anything else: "EOF")
// and sends an alive when nothing follows. Detection uses nothing else.
func TestDivergenceAgainstOriginalMaster(t *testing.T) {
	for _, diverged := range []bool{false, true} {
		t.Run("diverged="+strconv.FormatBool(diverged), func(t *testing.T) {
			aTail := nothing
			if diverged {
				aTail = pubs("a", 5, 2)
			}
			aDir, b, bDir, shared := forked(t, seq(createT, pubs("c", 20, 2)), aTail, pubs("b", 6, 1))
			b.Close()
			var raws [][]byte
			buf := binlogBytes(t, bDir)
			for len(buf) > 0 {
				_, _, n, err := binlog.DecodeSpan(buf)
				if err != nil {
					t.Fatal(err)
				}
				raws, buf = append(raws, buf[:n]), buf[n:]
			}
			var mu sync.Mutex
			asked := 0
			fm := startFake(t, func(_ int, id int64) ([]byte, bool) {
				mu.Lock()
				asked++
				mu.Unlock()
				from := -1
				if id == 0 {
					from = 0
				}
				for i, raw := range raws {
					if blockFirstID(raw) == id {
						from = i + 1
					}
				}
				if from < 0 {
					return protocol.AppendReplyError(nil, "EOF"), false
				}
				var out []byte
				for _, raw := range raws[from:] {
					out = append(out, frame(raw)...)
				}
				return append(out, protocol.AppendReplyAlive(nil)...), false
			})
			a := openBroker(t, aDir, true, nil)
			defer a.Close()
			s, err := NewSlave(a, SlaveOptions{MasterAddr: fm.addr, AliveInterval: testAlive, SilenceTimeout: 10 * time.Second, Logger: testLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			err = s.Check(context.Background())
			var d *DivergenceError
			if !diverged {
				if err != nil || asked != 1 {
					t.Fatalf("Check: %v after %d requests, want nil after 1", err, asked)
				}
				return
			}
			if !errors.As(err, &d) || !d.Found || d.CommonLast != shared || d.FirstDiff != shared+1 {
				t.Fatalf("Check: %v (%+v), want common prefix up to %d", err, d, shared)
			}
		})
	}
}

// TestDivergenceSearchBounded: the search gives up after MaxProbes and
// says that no common prefix was established.
func TestDivergenceSearchBounded(t *testing.T) {
	aDir, b, _, _ := forked(t, seq(createT, pubs("c", 10, 1)), pubs("a", 60, 1), pubs("b", 60, 1))
	ms := serveMaster(t, b, "", MasterOptions{AliveInterval: testAlive})
	a := openBroker(t, aDir, true, nil)
	defer a.Close()
	s, err := NewSlave(a, SlaveOptions{MasterAddr: ms.addr, AliveInterval: testAlive, SilenceTimeout: 10 * time.Second, MaxProbes: 3, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Check(context.Background())
	var d *DivergenceError
	if !errors.As(err, &d) || d.Found || d.Probes != 3 || !strings.Contains(err.Error(), "no common prefix") {
		t.Fatalf("Check: %v (%+v), want a bounded search without a prefix", err, d)
	}
}

// TestRefusingMasterIsNoDivergence: a master that refuses every request
// (a slave, which serves no replication, or one that no longer retains the
// position) shows no different history: replication stops with its text,
// as before, and not as a divergence (which would end the process and
// advise moving data aside).
func TestRefusingMasterIsNoDivergence(t *testing.T) {
	aDir, b, _, _ := forked(t, seq(createT, pubs("c", 10, 1)), pubs("a", 3, 1), nothing)
	b.Close()
	fm := startFake(t, func(int, int64) ([]byte, bool) {
		return protocol.AppendReplyError(nil, protocol.ErrNotSupported.Msg), false
	})
	a := openBroker(t, aDir, true, nil)
	defer a.Close()
	s, err := NewSlave(a, SlaveOptions{MasterAddr: fm.addr, AliveInterval: testAlive, SilenceTimeout: 10 * time.Second, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Check(context.Background())
	if !errors.Is(err, ErrStopped) || errors.Is(err, ErrDiverged) || !strings.Contains(err.Error(), protocol.ErrNotSupported.Msg) {
		t.Fatalf("Check: %v, want a stop with the master's refusal", err)
	}
}

// TestDivergenceMasterWithShortHistory: the new master started as a slave
// with -event 90, so it holds nothing before eventId 91 and refuses every
// probe below it. The gallop jumps over the short shared stretch into that
// refused region; the search still finds the common prefix in between.
func TestDivergenceMasterWithShortHistory(t *testing.T) {
	aDir, bDir := t.TempDir(), t.TempDir()
	a := openBroker(t, aDir, false, nil)
	seq(createT, pubs("c", 100, 1))(a) // 1..101
	ms := serveMaster(t, a, "", MasterOptions{})
	b := openBroker(t, bDir, true, nil)
	s, stop := runSlave(t, b, SlaveOptions{MasterAddr: ms.addr, StartEvent: 90})
	waitCaughtUp(t, s, a, 10*time.Second)
	stop()
	ms.stop()
	shared := a.LastEventID()
	pubs("a", 40, 1)(a)
	a.Close()
	b.Close()
	b = openBroker(t, bDir, false, nil)
	defer b.Close()
	pubs("b", 30, 1)(b)
	ms = serveMaster(t, b, "", MasterOptions{AliveInterval: testAlive})
	a = openBroker(t, aDir, true, nil)
	defer a.Close()
	sl, err := NewSlave(a, SlaveOptions{MasterAddr: ms.addr, AliveInterval: testAlive, SilenceTimeout: 10 * time.Second, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	err = sl.Check(context.Background())
	var d *DivergenceError
	if !errors.As(err, &d) || !d.Found || d.CommonLast != shared || d.FirstDiff != shared+1 {
		t.Fatalf("Check: %v (%+v), want the common prefix up to %d", err, d, shared)
	}
}

// TestUnverifiableAgainstOriginalMaster: retention removed every local
// block but the last, so the check can only anchor at its first eventId -
// 1, which an original master does not resolve ("EOF"). The slave then
// resumes as it always did, unchecked, instead of stopping.
func TestUnverifiableAgainstOriginalMaster(t *testing.T) {
	mdir, sdir := t.TempDir(), t.TempDir()
	m := openBroker(t, mdir, false, nil)
	seq(createT, pubs("c", 1, 3))(m) // 1, 2..4
	ms := serveMaster(t, m, "", MasterOptions{})
	sb := openBroker(t, sdir, true, nil)
	s, stop := runSlave(t, sb, SlaveOptions{MasterAddr: ms.addr})
	waitCaughtUp(t, s, m, 10*time.Second)
	stop()
	sb.Close()
	pubs("d", 1, 1)(m) // 5, into a new slave binlog file
	sb = openBroker(t, sdir, true, nil)
	s, stop = runSlave(t, sb, SlaveOptions{MasterAddr: ms.addr})
	waitCaughtUp(t, s, m, 10*time.Second)
	stop()
	old, err := sb.OldBinlogFiles(math.MaxInt64)
	if err != nil || len(old) == 0 {
		t.Fatalf("old binlog files %v: %v", old, err)
	}
	if _, err := sb.RemoveOldBinlogFile(old[0].ID); err != nil { // retention
		t.Fatal(err)
	}
	sb.Close()
	ms.stop()
	pubs("e", 1, 1)(m) // 6
	m.Close()

	var raws [][]byte
	buf := binlogBytes(t, mdir)
	for len(buf) > 0 {
		_, _, n, err := binlog.DecodeSpan(buf)
		if err != nil {
			t.Fatal(err)
		}
		raws, buf = append(raws, buf[:n]), buf[n:]
	}
	var mu sync.Mutex
	var asked []int64
	fm := startFake(t, func(_ int, id int64) ([]byte, bool) {
		mu.Lock()
		asked = append(asked, id)
		mu.Unlock()
		for i, raw := range raws {
			if blockFirstID(raw) == id {
				var out []byte
				for _, r := range raws[i+1:] {
					out = append(out, frame(r)...)
				}
				return out, false
			}
		}
		return protocol.AppendReplyError(nil, "EOF"), false
	})
	sb = openBroker(t, sdir, true, nil)
	defer sb.Close()
	sl, err := NewSlave(sb, SlaveOptions{MasterAddr: fm.addr, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := sl.Check(context.Background()); err != nil {
		t.Fatalf("Check: %v, want nil (unverifiable)", err)
	}
	s, stop = runSlave(t, sb, SlaveOptions{MasterAddr: fm.addr})
	smsstest.WaitFor(t, 10*time.Second, "the next block", func() bool { return s.Status().LastEventID == 6 })
	stop()
	mu.Lock()
	defer mu.Unlock()
	if got := fmt.Sprint(asked); got != "[4 4 5]" {
		t.Fatalf("replica requests %s, want [4 4 5] (Check, the session's check, the unchecked resume)", got)
	}
}
