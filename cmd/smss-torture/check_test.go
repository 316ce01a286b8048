package main

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/smssmq/smss/binlog"
)

// The checks must be able to fail: each case below is a binlog or a
// ledger with one defect a broken server could produce.

func blk(cmd uint8, id int64, topic string, payload []byte) []byte {
	return binlog.AppendBlock(nil, &binlog.Block{WriteTime: 1, Cmd: cmd, EventID: id, Timestamp: 1, Topic: []byte(topic), Payload: payload})
}

func create(id int64, topic string) []byte {
	return blk(binlog.CmdCreate, id, topic, make([]byte, 8))
}

func pub(id int64, topic string, bodies ...string) []byte {
	var recs []byte
	for _, b := range bodies {
		recs = append(recs, recordOf(b, 0)...)
	}
	return blk(binlog.CmdPub, id, topic, recs)
}

func delay(id int64, topic string, trigger int64, body string) []byte {
	p := binary.LittleEndian.AppendUint64(nil, uint64(trigger))
	p = binary.LittleEndian.AppendUint64(p, uint64(id))
	return blk(binlog.CmdDelay, id, topic, append(p, recordOf(body, 0)...))
}

func apply(id, delayID int64, topic string, trigger int64, body string) []byte {
	p := binary.LittleEndian.AppendUint64(nil, uint64(trigger))
	p = binary.LittleEndian.AppendUint64(p, uint64(delayID))
	return blk(binlog.CmdDelayApply, id, topic, append(p, recordOf(body, 0)...))
}

func cat(blocks ...[]byte) []byte {
	var out []byte
	for _, b := range blocks {
		out = append(out, b...)
	}
	return out
}

// torn is a create followed by the first bytes of a pub.
func torn() []byte {
	c := create(1, "p0")
	return cat(c, pub(2, "p0", "a"))[:len(c)+10]
}

func TestParseBinlogRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"reused eventId", cat(create(1, "p0"), pub(2, "p0", "a", "b"), pub(3, "p0", "c")), "reused"},
		{"pub to a missing topic", cat(create(1, "p0"), pub(2, "p1", "a")), "not alive"},
		{"double create", cat(create(1, "p0"), create(2, "p0")), "create of live topic"},
		{"apply without delay", cat(create(1, "d0"), apply(2, 1, "d0", 5, "x")), "does not hold"},
		{"torn tail", torn(), "inside a block"},
	} {
		if _, err := parseBinlog(tc.data, false); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	// A killed server's torn tail is tolerated where asked for.
	st, err := parseBinlog(torn(), true)
	if err != nil || st.blocks != 1 {
		t.Fatalf("tolerant parse: %v, %d blocks", err, st.blocks)
	}
}

func TestCheckLedgerFindsViolations(t *testing.T) {
	good := cat(create(1, "p0"), create(2, "d0"), pub(3, "p0", "a"), pub(4, "p0", "b", "c"),
		delay(6, "d0", 100, "d"), apply(7, 6, "d0", 100, "d"))
	st, err := parseBinlog(good, false)
	if err != nil {
		t.Fatal(err)
	}
	ledgerOf := func(edit func(*ledger)) *ledger {
		led := newLedger()
		for i, b := range []string{"a", "b", "c"} {
			led.pubs[b] = &pubRec{topic: "p0", worker: 0, seq: i, state: acked}
			led.order[0] = append(led.order[0], b)
		}
		led.delays["d"] = &delayRec{state: acked}
		if edit != nil {
			edit(led)
		}
		return led
	}
	if err := checkLedger(ledgerOf(nil), st, true, 0); err != nil {
		t.Fatalf("consistent ledger: %v", err)
	}
	for _, tc := range []struct {
		name string
		led  *ledger
		st   *binState
		want string
	}{
		{"acked but lost", ledgerOf(func(l *ledger) { l.pubs["e"] = &pubRec{topic: "p0", state: acked} }), st, "want exactly once"},
		{"refused but stored", ledgerOf(func(l *ledger) { l.pubs["a"].state = refused }), st, "want none"},
		{"foreign message", ledgerOf(func(l *ledger) { delete(l.pubs, "c") }), st, "nobody published"},
		{"order", ledgerOf(func(l *ledger) { l.order[0] = []string{"b", "a", "c"} }), st, "publisher 0"},
		{"delay acked but lost", ledgerOf(func(l *ledger) { l.delays["e"] = &delayRec{state: acked} }), st, "delayed message"},
		{"delay never applied", ledgerOf(nil), mustParse(t, cat(create(1, "p0"), create(2, "d0"), pub(3, "p0", "a"), pub(4, "p0", "b", "c"), delay(6, "d0", 100, "d"))), "never applied"},
		{"delay applied twice", ledgerOf(nil), mustParse(t, cat(good, apply(8, 6, "d0", 100, "d"))), "applied 2 times"},
		{"duplicate message", ledgerOf(nil), mustParse(t, cat(good, pub(8, "p0", "a"))), "2 times"},
		{"expired topic not reaped", ledgerOf(func(l *ledger) { l.topics["life-1"] = &topicRec{life: true, create: acked, expires: 50} }),
			mustParse(t, cat(good, create(8, "life-1"))), "not reaped"},
	} {
		reapBy := int64(0)
		if tc.name == "expired topic not reaped" {
			reapBy = 100
		}
		if err := checkLedger(tc.led, tc.st, true, reapBy); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

func mustParse(t *testing.T, data []byte) *binState {
	t.Helper()
	st, err := parseBinlog(data, false)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestSameMsgs(t *testing.T) {
	a := []topicMsg{{1, []byte("x")}, {2, []byte("y")}}
	if err := sameMsgs(a[:1], a, true); err != nil {
		t.Fatal(err)
	}
	for _, got := range [][]topicMsg{a[:1], {{1, []byte("x")}, {2, []byte("z")}}, {{1, []byte("x")}, {3, []byte("y")}}} {
		if sameMsgs(got, a, false) == nil {
			t.Errorf("%v accepted as %v", got, a)
		}
	}
}

func TestSubscriberRefusals(t *testing.T) {
	s := newSubscriber("x", "p0", "w", func() string { return "" })
	s.refused("w regiester exist", false)
	if _, err := s.snapshot(); err != nil {
		t.Fatal(err)
	}
	s.refused("corrupt data in topic file: ...", true)
	if _, err := s.snapshot(); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("a mid-stream 400 is a violation: %v", err)
	}
}

func TestFlags(t *testing.T) {
	var out, errOut strings.Builder
	for _, args := range [][]string{{"-cycles", "0"}, {"-pace", "-1s"}, {"extra"}} {
		if code := mainErr(args, &out, &errOut); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}
