package replication

import (
	"testing"
	"time"
)

// The age a master reports for a slave's oldest unconfirmed block
// (SlaveReports' LagMs, which a cluster's controller shrinks the in-sync
// set on) must clear once the slave said it has the block, whatever
// record said so: a confirm, or the hello a slave sends after its first
// apply. A mark left behind ages while the master is idle.
func TestLagMarkClearedByHelloAndConfirm(t *testing.T) {
	for _, tc := range []struct {
		name    string
		records []Confirm
		lagged  bool
	}{
		{"hello covers the batch", []Confirm{{Kind: ConfirmHello, EventID: 6}}, false},
		{"hello below it, confirm covers it", []Confirm{{Kind: ConfirmHello, EventID: 2}, {Kind: ConfirmConfirm, EventID: 6}}, false},
		{"hello below it, nothing else", []Confirm{{Kind: ConfirmHello, EventID: 2}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTestTracker(t, 1, false)
			c := newConfirmState(tr, "slave", func() int64 { return 6 }, nil, quiet)
			defer c.close()
			c.noteSent(time.Now().Add(-2 * time.Second)) // the batch up to 6, streamed before the hello
			for _, r := range tc.records {
				c.feed(AppendConfirm(nil, r))
			}
			reps := tr.SlaveReports()
			if len(reps) != 1 {
				t.Fatalf("reports: %+v", reps)
			}
			if lagged := reps[0].LagMs >= 2000; lagged != tc.lagged {
				t.Fatalf("LagMs %d after %+v; want lagged %v", reps[0].LagMs, tc.records, tc.lagged)
			}
		})
	}
}
