package cluster

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

const (
	instB = "0000000000bb"
	instC = "0000000000cc"
	instX = "0000000000ee"
)

// base: master a of epoch 3, b eligible, c admitted at 9 but not eligible.
func base() State {
	return State{Epoch: 3, Master: "a", Version: 10, ISR: []Member{
		{Node: "b", Instance: instB, Eligible: true, Added: 5},
		{Node: "c", Instance: instC, Added: 9},
	}}
}

func TestApply(t *testing.T) {
	tests := []struct {
		name  string
		state State
		cmd   Command
		want  func(*State) // applied at index 11; nil: refused
		err   error
	}{
		{"bootstrap", State{}, Command{Op: OpElect, Node: "b", NewEpoch: 1},
			func(s *State) { *s = State{Epoch: 1, Master: "b", Version: 11} }, nil},
		{"bootstrap may jump epochs", State{}, Command{Op: OpElect, Node: "b", NewEpoch: 7},
			func(s *State) { *s = State{Epoch: 7, Master: "b", Version: 11} }, nil},
		{"elect eligible", base(), Command{Op: OpElect, Epoch: 3, Version: 10, Node: "b", NewEpoch: 4, Reason: "r"},
			func(s *State) {
				s.Epoch, s.Master, s.Version, s.Reason = 4, "b", 11, "r"
				s.ISR = s.ISR[1:]
			}, nil},
		{"elect stale version", base(), Command{Op: OpElect, Epoch: 3, Version: 9, Node: "b", NewEpoch: 4}, nil, ErrStale},
		{"elect stale epoch", base(), Command{Op: OpElect, Epoch: 2, Version: 10, Node: "b", NewEpoch: 3}, nil, ErrStale},
		{"elect not eligible", base(), Command{Op: OpElect, Epoch: 3, Version: 10, Node: "c", NewEpoch: 4}, nil, ErrRefused},
		{"elect not in ISR", base(), Command{Op: OpElect, Epoch: 3, Version: 10, Node: "d", NewEpoch: 4}, nil, ErrRefused},
		{"elect the master", base(), Command{Op: OpElect, Epoch: 3, Version: 10, Node: "a", NewEpoch: 4}, nil, ErrRefused},
		{"add", base(), Command{Op: OpISRAdd, Epoch: 3, Version: 10, Node: "d", Instance: instX},
			func(s *State) {
				s.Version = 11
				s.ISR = append(s.ISR, Member{Node: "d", Instance: instX, Added: 11})
			}, nil},
		{"add sorts", State{Epoch: 1, Master: "a", Version: 2, ISR: []Member{{Node: "c", Instance: instC}}},
			Command{Op: OpISRAdd, Epoch: 1, Version: 2, Node: "b", Instance: instB},
			func(s *State) {
				s.Version = 11
				s.ISR = []Member{{Node: "b", Instance: instB, Added: 11}, {Node: "c", Instance: instC}}
			}, nil},
		{"add another instance replaces, ineligible", base(), Command{Op: OpISRAdd, Epoch: 3, Version: 10, Node: "b", Instance: instX},
			func(s *State) {
				s.Version = 11
				s.ISR[0] = Member{Node: "b", Instance: instX, Added: 11}
			}, nil},
		{"add same instance", base(), Command{Op: OpISRAdd, Epoch: 3, Version: 10, Node: "b", Instance: instB}, nil, ErrRefused},
		{"add master", base(), Command{Op: OpISRAdd, Epoch: 3, Version: 10, Node: "a", Instance: instX}, nil, ErrRefused},
		{"add before bootstrap", State{}, Command{Op: OpISRAdd, Node: "a", Instance: instX}, nil, ErrRefused},
		{"add stale", base(), Command{Op: OpISRAdd, Epoch: 3, Version: 7, Node: "d", Instance: instX}, nil, ErrStale},
		{"remove", base(), Command{Op: OpISRRemove, Epoch: 3, Version: 10, Node: "b"},
			func(s *State) { s.Version, s.ISR = 11, s.ISR[1:] }, nil},
		{"remove non-member", base(), Command{Op: OpISRRemove, Epoch: 3, Version: 10, Node: "d"}, nil, ErrRefused},
		{"mark eligible", base(), Command{Op: OpMarkEligible, Epoch: 3, Version: 10, Node: "c", AfterVersion: 9},
			func(s *State) { s.Version, s.ISR[1].Eligible = 11, true }, nil},
		{"mark eligible, other admission", base(), Command{Op: OpMarkEligible, Epoch: 3, Version: 10, Node: "c", AfterVersion: 8}, nil, ErrRefused},
		{"mark eligible twice", base(), Command{Op: OpMarkEligible, Epoch: 3, Version: 10, Node: "b", AfterVersion: 5}, nil, ErrRefused},
		{"mark eligible stale", base(), Command{Op: OpMarkEligible, Epoch: 3, Version: 11, Node: "c", AfterVersion: 9}, nil, ErrStale},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.state.Clone()
			got, err := apply(tt.state, tt.cmd, 11)
			if tt.want == nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("err %v, want %v", err, tt.err)
				}
				if !reflect.DeepEqual(got, before) {
					t.Fatalf("refused command changed the state: %+v", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := tt.state.Clone()
			tt.want(&want)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("state\n%+v\nwant\n%+v", got, want)
			}
			if !reflect.DeepEqual(tt.state, before) {
				t.Fatal("apply modified its input")
			}
			if err := checkState(got); err != nil {
				t.Fatalf("applied state invalid: %v", err)
			}
		})
	}
}

func TestDecodeCommandRefuses(t *testing.T) {
	good, err := EncodeCommand(Command{Op: OpISRAdd, Node: "b", Instance: instB})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := DecodeCommand(good); err != nil || c.Node != "b" {
		t.Fatalf("round trip: %+v %v", c, err)
	}
	for name, b := range map[string][]byte{
		"empty":          nil,
		"format":         append([]byte{2}, good[1:]...),
		"not json":       []byte("\x01{"),
		"unknown field":  []byte(`` + "\x01" + `{"op":"isrRemove","node":"b","x":1}`),
		"trailing":       append(bytes.Clone(good), []byte(" {}")...),
		"unknown op":     []byte("\x01" + `{"op":"drop","node":"b"}`),
		"no node":        []byte("\x01" + `{"op":"isrRemove"}`),
		"bad node":       []byte("\x01" + `{"op":"isrRemove","node":"b c"}`),
		"bad instance":   []byte("\x01" + `{"op":"isrAdd","node":"b","instance":"XYZ"}`),
		"epoch not up":   []byte("\x01" + `{"op":"elect","node":"b","epoch":3,"newEpoch":3}`),
		"no afterVers":   []byte("\x01" + `{"op":"markEligible","node":"b"}`),
		"negative epoch": []byte("\x01" + `{"op":"elect","node":"b","epoch":-1,"newEpoch":3}`),
		"huge":           append([]byte("\x01"), bytes.Repeat([]byte(" "), maxCommandBytes)...),
	} {
		if _, err := DecodeCommand(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err %v, want ErrMalformed", name, err)
		}
	}
}

func TestFSMApplyRefusesLoudly(t *testing.T) {
	var logs lockedBuffer
	f := newFSM(slog.New(slog.NewTextHandler(&logs, nil)))
	if err, _ := f.Apply(&raft.Log{Index: 1, Data: []byte("junk")}).(error); !errors.Is(err, ErrMalformed) {
		t.Fatalf("junk: %v", err)
	}
	b, _ := EncodeCommand(Command{Op: OpElect, Node: "a", NewEpoch: 1})
	if r := f.Apply(&raft.Log{Index: 2, Data: b}); r != nil {
		t.Fatalf("elect: %v", r)
	}
	// The same decision again: decided on version 0, the state is at 2.
	if err, _ := f.Apply(&raft.Log{Index: 3, Data: b}).(error); !errors.Is(err, ErrStale) {
		t.Fatalf("replayed elect: %v", err)
	}
	if st := f.State(); st.Epoch != 1 || st.Master != "a" || st.Version != 2 {
		t.Fatalf("state %+v", st)
	}
	if s := logs.String(); !strings.Contains(s, "level=ERROR") || !strings.Contains(s, "stale") {
		t.Fatalf("refusals not logged:\n%s", s)
	}
}

func TestSnapshotRestore(t *testing.T) {
	f := newFSM(slog.New(slog.DiscardHandler))
	f.state = base()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	g := newFSM(slog.New(slog.DiscardHandler))
	if err := g.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g.State(), base()) {
		t.Fatalf("restored %+v", g.State())
	}
	if got := <-g.Changes(); !reflect.DeepEqual(got, base()) {
		t.Fatalf("restore not published: %+v", got)
	}
	for name, data := range map[string]string{
		"junk":           "xx",
		"unknown field":  `{"epoch":1,"master":"a","zz":1}`,
		"master in ISR":  `{"epoch":1,"master":"a","isr":[{"node":"a","instance":"0000000000aa"}]}`,
		"unsorted":       `{"epoch":1,"master":"a","isr":[{"node":"c","instance":"0000000000cc"},{"node":"b","instance":"0000000000bb"}]}`,
		"epoch, no mstr": `{"epoch":1}`,
	} {
		if err := g.Restore(io.NopCloser(strings.NewReader(data))); err == nil {
			t.Errorf("%s: restored", name)
		}
	}
	if !reflect.DeepEqual(g.State(), base()) {
		t.Fatalf("a refused snapshot changed the state: %+v", g.State())
	}
}

// Changes never blocks the FSM and always ends on the newest state.
func TestChangesCoalesce(t *testing.T) {
	f := newFSM(slog.New(slog.DiscardHandler))
	b, _ := EncodeCommand(Command{Op: OpElect, Node: "a", NewEpoch: 1})
	f.Apply(&raft.Log{Index: 1, Data: b})
	for i := uint64(2); i < 50; i++ {
		add, _ := EncodeCommand(Command{Op: OpISRAdd, Epoch: 1, Version: i - 1, Node: "b", Instance: "0000000000" + []string{"b1", "b2"}[i%2]})
		if r := f.Apply(&raft.Log{Index: i, Data: add}); r != nil {
			t.Fatal(r)
		}
	}
	got := <-f.Changes()
	if got.Version != 49 {
		t.Fatalf("received version %d, want the newest 49", got.Version)
	}
	select {
	case s := <-f.Changes():
		t.Fatalf("a second, older state: %+v", s)
	default:
	}
}

// (*Changes is the node's accessor; the fsm's own channel is the same.)
func (f *fsm) Changes() <-chan State { return f.changes }

type memSink struct{ bytes.Buffer }

func (*memSink) ID() string    { return "mem" }
func (*memSink) Cancel() error { return nil }
func (*memSink) Close() error  { return nil }
