package cluster

import (
	"reflect"
	"testing"
)

// FuzzDecodeCommand: raft entries come from the network. Decoding never
// panics; a decoded command encodes back to one that decodes the same; and
// applying it to a state never panics and leaves a valid state.
func FuzzDecodeCommand(f *testing.F) {
	for _, c := range []Command{
		{Op: OpElect, Epoch: 3, Version: 10, Node: "b", NewEpoch: 4, Reason: "r"},
		{Op: OpISRAdd, Epoch: 3, Version: 10, Node: "d", Instance: instX},
		{Op: OpISRRemove, Epoch: 3, Version: 10, Node: "c"},
		{Op: OpMarkEligible, Epoch: 3, Version: 10, Node: "c", AfterVersion: 9},
	} {
		b, err := EncodeCommand(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("\x01{}"))
	f.Add([]byte("\x01null"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeCommand(b)
		if err != nil {
			return
		}
		again, err := EncodeCommand(c)
		if err != nil {
			t.Fatalf("decoded %+v does not encode: %v", c, err)
		}
		c2, err := DecodeCommand(again)
		if err != nil || !reflect.DeepEqual(c, c2) {
			t.Fatalf("round trip: %+v -> %+v, %v", c, c2, err)
		}
		for _, s := range []State{{}, base()} {
			next, err := apply(s, c, 11)
			if err != nil {
				continue
			}
			if err := checkState(next); err != nil {
				t.Fatalf("%+v applied to %+v: invalid state %+v: %v", c, s, next, err)
			}
		}
	})
}
