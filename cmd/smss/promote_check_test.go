package main

import (
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/cluster"
	"github.com/smssmq/smss/replication"
)

func TestPromoteRisk(t *testing.T) {
	for _, tc := range []struct {
		name     string
		last, cp int64
		v2, seen bool
		want     string // "" none; else a substring
	}{
		{"caught up with the commit point", 50, 50, true, true, ""},
		{"ahead of the commit point", 60, 50, true, true, ""},
		{"behind the commit point", 40, 50, true, true, "the writes of eventIds 41..50 would be lost"},
		{"behind, old stream on the last session", 40, 50, false, true, "up to eventId 50"},
		{"never received one from a synchronous master", 40, 0, true, false, "never received its commit point"},
		{"asynchronous master: nothing to know", 40, 0, false, false, ""},
		{"empty slave, synchronous master, commit point 0 received", 0, 0, true, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := promoteRisk(tc.last, tc.cp, tc.v2, tc.seen)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("promoteRisk(%d, %d, %v, %v) = %q, want %q", tc.last, tc.cp, tc.v2, tc.seen, got, tc.want)
			}
		})
	}
}

func TestPickSwitchoverTarget(t *testing.T) {
	probe := func(id string, last int64, ok bool) cluster.NodeProbe {
		p := cluster.NodeProbe{ID: id, OK: ok, Report: cluster.Report{LastEventID: last}, Age: time.Second}
		return p
	}
	isr := []cluster.Member{{Node: "b", Eligible: true}, {Node: "c", Eligible: true}, {Node: "d"}}
	for _, tc := range []struct {
		name   string
		st     cluster.State
		probes []cluster.NodeProbe
		want   string
	}{
		{"most advanced eligible", cluster.State{Master: "a", ISR: isr},
			[]cluster.NodeProbe{probe("b", 10, true), probe("c", 12, true), probe("d", 99, true)}, "c"},
		{"a tie: the lowest id", cluster.State{Master: "a", ISR: isr},
			[]cluster.NodeProbe{probe("b", 12, true), probe("c", 12, true)}, "b"},
		{"a failed probe counts as nothing", cluster.State{Master: "a", ISR: isr},
			[]cluster.NodeProbe{probe("b", 10, true), probe("c", 12, false)}, "b"},
		{"none eligible", cluster.State{Master: "a", ISR: []cluster.Member{{Node: "d"}}}, nil, ""},
		{"empty set", cluster.State{Master: "a"}, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := pickSwitchoverTarget(tc.st, tc.probes); got != tc.want {
				t.Fatalf("pickSwitchoverTarget = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestSlaveStream: the stream view of status, and the promote refusal it
// gives, for each state of a slave's stream.
func TestSlaveStream(t *testing.T) {
	now := time.Unix(1000, 0)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	for _, tc := range []struct {
		name      string
		st        replication.Status
		after     time.Duration
		quiet     int64
		caughtUp  bool
		refused   bool
		lastBlock int64
	}{
		{"block just now", replication.Status{State: replication.StateStreaming, ConnectedSince: ago(time.Minute), LastBlockAt: ago(5 * time.Millisecond)},
			2 * time.Second, 5, false, true, ago(5 * time.Millisecond).UnixMilli()},
		{"quiet long enough", replication.Status{State: replication.StateStreaming, ConnectedSince: ago(time.Minute), LastBlockAt: ago(3 * time.Second)},
			2 * time.Second, 3000, true, false, ago(3 * time.Second).UnixMilli()},
		{"block before this stream opened", replication.Status{State: replication.StateStreaming, ConnectedSince: ago(time.Second), LastBlockAt: ago(time.Minute)},
			2 * time.Second, 1000, false, true, ago(time.Minute).UnixMilli()},
		{"no block yet", replication.Status{State: replication.StateStreaming, ConnectedSince: ago(3 * time.Second)},
			2 * time.Second, 3000, true, false, 0},
		{"not streaming", replication.Status{State: replication.StateConnecting, LastBlockAt: ago(time.Millisecond)},
			2 * time.Second, -1, false, false, ago(time.Millisecond).UnixMilli()},
		{"check off", replication.Status{State: replication.StateStreaming, ConnectedSince: ago(time.Minute), LastBlockAt: ago(time.Millisecond)},
			0, 1, true, false, ago(time.Millisecond).UnixMilli()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := slaveStream(tc.st, tc.after, now)
			if v.QuietMs != tc.quiet || v.CaughtUp != tc.caughtUp || v.LastBlockAt != tc.lastBlock || v.QuietAfterMs != tc.after.Milliseconds() {
				t.Errorf("view %+v, want quietMs %d caughtUp %v lastBlockAt %d", v, tc.quiet, tc.caughtUp, tc.lastBlock)
			}
			if got := stillStreaming(v) != ""; got != tc.refused {
				t.Errorf("refused %v, want %v (%q)", got, tc.refused, stillStreaming(v))
			}
		})
	}
}
