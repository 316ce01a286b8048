package meta

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

// The record of Appendix A: header traceId=x1, body "hello".
func appendixRecord(t testing.TB) []byte {
	return append(unhex(t, "16000000 01000000 07000000"), []byte("traceId\x02\x00\x00\x00x1hello")...)
}

// Golden keys and values seen in the original's badger dump (Appendix A).
func TestKeyLayoutGolden(t *testing.T) {
	rec := appendixRecord(t)
	trigger := int64(0x000001a22706d602)
	tests := []struct {
		name      string
		got, want []byte
	}{
		{"delay key", DelayKey(trigger, 20, []byte("order")),
			append(append([]byte("delay@"), unhex(t, "000001a22706d602 1400000000000000")...), "order"...)},
		{"delay value", DelayValue(trigger, 20, rec),
			append(unhex(t, "02d60627a2010000 1400000000000000"), rec...)},
		{"life key", LifeKey(0x000001a226fddd19, []byte("life1")),
			append(append([]byte("lf@"), unhex(t, "000001a226fddd19")...), "life1"...)},
		{"norm key", NormKey([]byte("order")), []byte("norm@order")},
		{"norm value", EncodeTopicValue(&Topic{Name: "order", CreateTime: 0x1a226fa68b1, CreateEventID: 1,
			StateChangeTime: 0x1a226fa68b1, StateChangeEventID: 1}),
			unhex(t, "b168fa26a2010000 0000000000000000 0100000000000000 b168fa26a2010000 0100000000000000 00")},
		{"checkpoint", encodeCheckpoint(Checkpoint{BinlogFileID: 3, BinlogOffset: 0x1122, NextEventID: 256}),
			unhex(t, "0300000000000000 2211000000000000 0001000000000000")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !bytes.Equal(tc.got, tc.want) {
				t.Fatalf("got  %x\nwant %x", tc.got, tc.want)
			}
		})
	}
}

func TestDelayKeyFromValue(t *testing.T) {
	tests := []struct {
		trigger, id int64
		name        string
		records     []byte
	}{
		{0x000001a22706d602, 20, "order", appendixRecord(t)},
		{1, 1, "a", nil},
		{1<<62 + 12345, 1<<40 + 7, strings.Repeat("n", 128), []byte("xyz")},
	}
	for _, tc := range tests {
		v := DelayValue(tc.trigger, tc.id, tc.records)
		got, err := DelayKeyFromValue(v, []byte(tc.name))
		if err != nil {
			t.Fatalf("DelayKeyFromValue: %v", err)
		}
		if want := DelayKey(tc.trigger, tc.id, []byte(tc.name)); !bytes.Equal(got, want) {
			t.Fatalf("key from value %x, want %x", got, want)
		}
		if err := checkDelayEntry(got, v); err != nil {
			t.Fatalf("checkDelayEntry: %v", err)
		}
		trig, id, name, err := ParseDelayKey(got)
		if err != nil || trig != tc.trigger || id != tc.id || name != tc.name {
			t.Fatalf("ParseDelayKey = %d %d %q %v", trig, id, name, err)
		}
	}
	if _, err := DelayKeyFromValue(make([]byte, 15), []byte("x")); !errors.Is(err, ErrMalformed) {
		t.Fatalf("short value: err %v, want ErrMalformed", err)
	}
}

func TestParseKeysRejectMalformed(t *testing.T) {
	for _, k := range [][]byte{nil, []byte("delay@"), []byte("delay@0123456789abcde"), []byte("norm@0123456789abcdefxy")} {
		if _, _, _, err := ParseDelayKey(k); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseDelayKey(%q) err %v", k, err)
		}
	}
	for _, k := range [][]byte{nil, []byte("lf@1234567"), []byte("xx@12345678name")} {
		if _, _, err := ParseLifeKey(k); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseLifeKey(%q) err %v", k, err)
		}
	}
	at, name, err := ParseLifeKey(LifeKey(42, []byte("t")))
	if err != nil || at != 42 || name != "t" {
		t.Fatalf("ParseLifeKey = %d %q %v", at, name, err)
	}
	key := DelayKey(5, 6, []byte("t"))
	for _, v := range [][]byte{DelayValue(4, 6, nil), DelayValue(5, 7, nil), make([]byte, 10)} {
		if err := checkDelayEntry(key, v); !errors.Is(err, ErrMalformed) {
			t.Errorf("checkDelayEntry(%x) err %v", v, err)
		}
	}
	if _, err := decodeCheckpoint(make([]byte, 23)); !errors.Is(err, ErrMalformed) {
		t.Errorf("decodeCheckpoint short: %v", err)
	}
}

// Big-endian times make byte order equal time order for the values real
// clocks produce.
func TestKeyOrderFollowsTime(t *testing.T) {
	times := []int64{0, 1, 255, 256, 1 << 32, 0x000001a22706d602, 1<<63 - 1}
	for i := 1; i < len(times); i++ {
		a, b := DelayKey(times[i-1], 99, []byte("z")), DelayKey(times[i], 1, []byte("a"))
		if bytes.Compare(a, b) >= 0 {
			t.Errorf("delay key for %d not before %d", times[i-1], times[i])
		}
		la, lb := LifeKey(times[i-1], []byte("z")), LifeKey(times[i], []byte("a"))
		if bytes.Compare(la, lb) >= 0 {
			t.Errorf("life key for %d not before %d", times[i-1], times[i])
		}
	}
}

func FuzzParseDelayKey(f *testing.F) {
	f.Add(DelayKey(0x000001a22706d602, 20, []byte("order")))
	f.Add([]byte("delay@"))
	f.Add([]byte("delay@\x00\x00\x01"))
	f.Fuzz(func(t *testing.T, key []byte) {
		trig, id, name, err := ParseDelayKey(key)
		if err != nil {
			return
		}
		if again := DelayKey(trig, id, []byte(name)); !bytes.Equal(again, key) {
			t.Fatalf("round trip %x -> %x", key, again)
		}
	})
}

func FuzzDelayKeyFromValue(f *testing.F) {
	f.Add(DelayValue(0x000001a22706d602, 20, []byte("rec")), []byte("order"))
	f.Add([]byte{1, 2, 3}, []byte("x"))
	f.Fuzz(func(t *testing.T, value, name []byte) {
		key, err := DelayKeyFromValue(value, name)
		if err != nil {
			if len(value) >= DelayHeaderSize {
				t.Fatalf("rejected %d-byte value: %v", len(value), err)
			}
			return
		}
		if err := checkDelayEntry(key, value); err != nil {
			t.Fatalf("key from value does not match it: %v", err)
		}
		_, _, gotName, err := ParseDelayKey(key)
		if err != nil || gotName != string(name) {
			t.Fatalf("ParseDelayKey = %q, %v", gotName, err)
		}
	})
}

func FuzzDecodeTopicValue(f *testing.F) {
	f.Add(EncodeTopicValue(&Topic{CreateTime: 1, ExpireAt: 2, CreateEventID: 3}))
	f.Add([]byte{0})
	f.Fuzz(func(t *testing.T, b []byte) {
		tp, err := DecodeTopicValue("t", b)
		if err != nil {
			return
		}
		if again := EncodeTopicValue(&tp); !bytes.Equal(again, b) {
			t.Fatalf("round trip %x -> %x", b, again)
		}
	})
}
