package replication

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// confirmDeadline bounds the waits of the sender tests.
const confirmDeadline = 10 * time.Second

func TestConfirmRecordBytes(t *testing.T) {
	cases := []struct {
		name string
		c    Confirm
		hex  string
	}{
		{"hello", Confirm{Kind: ConfirmHello, Instance: [6]byte{1, 2, 3, 4, 5, 6}, EventID: 0x0102030405},
			"534d4331" + "01" + "00" + "010203040506" + "0504030201000000"},
		{"hello fsynced at 0", Confirm{Kind: ConfirmHello, Fsynced: true},
			"534d4331" + "01" + "01" + "000000000000" + "0000000000000000"},
		{"confirm", Confirm{Kind: ConfirmConfirm, EventID: 7},
			"534d4331" + "02" + "00" + "000000000000" + "0700000000000000"},
		{"confirm drops the instance", Confirm{Kind: ConfirmConfirm, Fsynced: true, Instance: [6]byte{9}, EventID: 1 << 40},
			"534d4331" + "02" + "01" + "000000000000" + "0000000000010000"},
		{"hello version 2 fsynced", Confirm{Kind: ConfirmHello, Fsynced: true, V2: true, Instance: [6]byte{0xaa}, EventID: 3},
			"534d4331" + "01" + "03" + "aa0000000000" + "0300000000000000"},
		{"a replica reader's hello", Confirm{Kind: ConfirmHello, V2: true, Reader: true},
			"534d4331" + "01" + "06" + "000000000000" + "0000000000000000"},
		{"epoch 5", Confirm{Kind: ConfirmEpoch, EventID: 5},
			"534d4331" + "03" + "00" + "000000000000" + "0500000000000000"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := AppendConfirm([]byte("x"), tc.c)
			if want := append([]byte("x"), mustHex(tc.hex)...); !bytes.Equal(b, want) {
				t.Fatalf("encoded %x, want %x", b, want)
			}
			got, err := DecodeConfirm(b[1:])
			if err != nil {
				t.Fatal(err)
			}
			want := tc.c
			if want.Kind != ConfirmHello {
				want.Instance, want.V2 = [6]byte{}, false
			}
			if got != want {
				t.Fatalf("decoded %+v, want %+v", got, want)
			}
		})
	}
}

func TestDecodeConfirmRejects(t *testing.T) {
	good := AppendConfirm(nil, Confirm{Kind: ConfirmConfirm, EventID: 5})
	mod := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	cases := []struct {
		name string
		b    []byte
		want string
	}{
		{"short", good[:19], "19 bytes"},
		{"long", append(append([]byte(nil), good...), 0), "21 bytes"},
		{"empty", nil, "0 bytes"},
		{"magic", mod(func(b []byte) []byte { b[3] = '2'; return b }), "magic"},
		{"kind 0", mod(func(b []byte) []byte { b[4] = 0; return b }), "kind 0"},
		{"kind 4", mod(func(b []byte) []byte { b[4] = 4; return b }), "kind 4"},
		{"flags", mod(func(b []byte) []byte { b[5] = 4; return b }), "unknown flags"},
		{"version 2 flag on a confirm", mod(func(b []byte) []byte { b[5] = ConfirmV2; return b }), "unknown flags"},
		{"flags on an epoch record", mod(func(b []byte) []byte { b[4], b[5] = ConfirmEpoch, ConfirmFsynced; return b }), "unknown flags"},
		{"reserved bytes of an epoch record", mod(func(b []byte) []byte { b[4], b[7] = ConfirmEpoch, 1; return b }), "reserved"},
		{"reserved", mod(func(b []byte) []byte { b[11] = 1; return b }), "reserved"},
		{"negative", mod(func(b []byte) []byte { b[19] = 0x80; return b }), "negative"},
		{"2-byte acks", bytes.Repeat([]byte{1, 0}, 10), "magic"},
		{"reader flag without version 2", mod(func(b []byte) []byte { b[4], b[5], b[12] = ConfirmHello, ConfirmReader, 0; return b }), "a reader's hello"},
		{"a reader's hello fsynced", mod(func(b []byte) []byte { b[4], b[5], b[12] = ConfirmHello, 7, 0; return b }), "a reader's hello"},
		{"a reader's hello with a position", mod(func(b []byte) []byte { b[4], b[5] = ConfirmHello, 6; return b }), "a reader's hello"},
		{"a reader's hello with an instance", mod(func(b []byte) []byte { b[4], b[5], b[6], b[12] = ConfirmHello, 6, 1, 0; return b }), "a reader's hello"},
		{"reader flag on a confirm", mod(func(b []byte) []byte { b[5] = ConfirmReader | ConfirmV2; return b }), "unknown flags"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeConfirm(tc.b)
			if !errors.Is(err, ErrBadConfirm) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want ErrBadConfirm with %q", err, tc.want)
			}
		})
	}
}

func TestIsConfirmPrefix(t *testing.T) {
	for _, tc := range []struct {
		b    string
		want bool
	}{
		{"", true}, {"S", true}, {"SM", true}, {"SMC", true}, {"SMC1", true}, {"SMC1\x02rest", true},
		{"\x01\x00", false}, {"SMC2", false}, {"X", false}, {"SMX", false},
	} {
		if got := IsConfirmPrefix([]byte(tc.b)); got != tc.want {
			t.Errorf("IsConfirmPrefix(%q) = %v, want %v", tc.b, got, tc.want)
		}
	}
}

// FuzzDecodeConfirm: arbitrary bytes never panic the decoder, and what it
// accepts encodes back to the same bytes.
func FuzzDecodeConfirm(f *testing.F) {
	f.Add(AppendConfirm(nil, Confirm{Kind: ConfirmHello, Instance: [6]byte{1, 2, 3, 4, 5, 6}, EventID: 9}))
	f.Add(AppendConfirm(nil, Confirm{Kind: ConfirmConfirm, Fsynced: true, EventID: 1 << 50}))
	f.Add(AppendConfirm(nil, Confirm{Kind: ConfirmHello, V2: true, Reader: true}))
	f.Add([]byte{1, 0, 1, 0})
	f.Add([]byte("SMC1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeConfirm(b)
		if err != nil {
			if !errors.Is(err, ErrBadConfirm) {
				t.Fatalf("error %v does not wrap ErrBadConfirm", err)
			}
			return
		}
		if c.EventID < 0 {
			t.Fatalf("negative eventId %d accepted", c.EventID)
		}
		if re := AppendConfirm(nil, c); !bytes.Equal(re, b) {
			t.Fatalf("re-encoded %x, input %x", re, b)
		}
	})
}

// FuzzConfirmFeed: whatever a slave sends, in whatever pieces, the
// master's parser never panics, never counts a connection whose first
// bytes are not the magic, and never lets a confirmation exceed what the
// stream sent.
func FuzzConfirmFeed(f *testing.F) {
	hello := AppendConfirm(nil, Confirm{Kind: ConfirmHello, EventID: 3})
	f.Add(append(hello, AppendConfirm(nil, Confirm{Kind: ConfirmConfirm, EventID: 9})...), uint8(7))
	f.Add([]byte{1, 0, 1, 0, 1, 0}, uint8(1))
	f.Add(append(hello, hello...), uint8(20))
	f.Add(append(hello, AppendConfirm(nil, Confirm{Kind: ConfirmConfirm, EventID: 1 << 40})...), uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, step uint8) {
		tr := newTestTracker(t, 1, false)
		const sent = 100
		c := newConfirmState(tr, "slave", func() int64 { return sent }, nil, quiet)
		n := max(int(step), 1)
		for off := 0; off < len(data); off += n {
			c.feed(data[off:min(off+n, len(data))])
		}
		in, _ := tr.Info()
		if !IsConfirmPrefix(data) && in.Confirming != 0 {
			t.Fatal("a connection not starting with the magic counts")
		}
		if in.Confirmed > sent {
			t.Fatalf("confirmed %d beyond the %d sent", in.Confirmed, sent)
		}
		c.close()
		if in, _ := tr.Info(); in.Confirming != 0 {
			t.Fatal("closed connection still counts")
		}
	})
}

// TestConfirmSenderNeverBlocksThePoster: post returns at once whether the
// socket takes the record (the apply loop writes it) or not (the sender
// does, waiting), and the master reads whole records, the hello first and
// then positions only rising, ending with the last one posted, across a
// socket that filled up while nobody read it.
func TestConfirmSenderNeverBlocksThePoster(t *testing.T) {
	for _, tc := range []struct {
		name string
		cut  bool
	}{{"whole records", false}, {"records cut short", true}} {
		t.Run(tc.name, func(t *testing.T) { testConfirmSender(t, tc.cut) })
	}
}

// testConfirmSender is TestConfirmSenderNeverBlocksThePoster; with cut,
// every third record the apply loop writes goes out only in part, as from
// a socket with room for a few bytes (rare: the kernel seldom takes part
// of 20 bytes), and the sender must finish it before anything else.
func testConfirmSender(t *testing.T, cut bool) {
	master, slave := tcpPair(t)
	_ = slave.(*net.TCPConn).SetWriteBuffer(4096)
	_ = master.(*net.TCPConn).SetReadBuffer(4096)
	cs := newConfirmSender(slave, [InstanceIDLen]byte{7}, true, confirmDeadline, quiet)
	if cut {
		calls := 0
		cs.tryWrite = func(p []byte) (int, error) {
			if calls++; calls%3 == 0 {
				return cs.sock.TryWrite(p[:len(p)/2])
			}
			return cs.sock.TryWrite(p)
		}
	}
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); cs.run(quit) }()
	defer func() { close(quit); slave.Close(); <-done }()

	// Nobody reads while 20,000 positions are posted: far more than the
	// buffers hold.
	const last = 20000
	posted := make(chan struct{})
	go func() {
		defer close(posted)
		for pos := int64(1); pos <= last; pos++ {
			cs.post(pos)
		}
	}()
	select {
	case <-posted:
	case <-time.After(confirmDeadline):
		t.Fatal("post waited for the network")
	}
	master.SetReadDeadline(time.Now().Add(confirmDeadline))
	var rec [ConfirmLen]byte
	prev := int64(0)
	for i := 0; prev < last; i++ {
		if _, err := io.ReadFull(master, rec[:]); err != nil {
			t.Fatalf("record %d (after position %d): %v", i, prev, err)
		}
		c, err := DecodeConfirm(rec[:])
		if err != nil {
			t.Fatalf("record %d (after position %d): %v", i, prev, err)
		}
		if want := i == 0; (c.Kind == ConfirmHello) != want {
			t.Fatalf("record %d is kind %d (hello %v)", i, c.Kind, want)
		}
		if c.EventID <= prev && i > 0 || (c.Instance != [InstanceIDLen]byte{7}) != (i > 0) || !c.Fsynced {
			t.Fatalf("record %d: %+v after position %d", i, c, prev)
		}
		prev = c.EventID
	}
}
