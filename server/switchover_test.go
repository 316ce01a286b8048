package server

import (
	"context"
	"sync"
	"testing"

	"github.com/smssmq/smss/protocol"
)

// fakeCluster is a Failover of a cluster node: checked promotion and
// switchover.
type fakeCluster struct {
	fakeFailover
	mu2      sync.Mutex
	forces   []bool
	targets  []string
	warning  string
	swErr    error
	master   string
	swEpoch  uint64
	checkErr error
}

func (f *fakeCluster) PromoteChecked(_ context.Context, force bool) (uint64, string, error) {
	f.mu2.Lock()
	defer f.mu2.Unlock()
	f.forces = append(f.forces, force)
	if f.checkErr != nil && !force {
		return 0, "", f.checkErr
	}
	return f.epoch, f.warning, nil
}

func (f *fakeCluster) Switchover(_ context.Context, target string) (string, uint64, error) {
	f.mu2.Lock()
	defer f.mu2.Unlock()
	f.targets = append(f.targets, target)
	return f.master, f.swEpoch, f.swErr
}

func switchoverReq(target string) []byte {
	return enc(protocol.AppendSwitchover(nil, target, []byte("tr")))
}
func promoteForceReq() []byte { return enc(protocol.AppendPromoteForce(nil, nil)) }
func promoteOptReq(opt string) []byte {
	return enc(protocol.AppendRequest(nil, protocol.CmdPromote, [16]byte{}, []byte(opt), nil, nil))
}

func TestSwitchoverAndCheckedPromote(t *testing.T) {
	refused := protocol.NewBizError("promote refused: behind")
	for _, tc := range []struct {
		name     string
		failover Failover // nil: the server has none
		steps    []step
		forces   []bool
		targets  []string
	}{
		{"switchover to a node", &fakeCluster{master: "b", swEpoch: 5}, []step{
			{"switchover", switchoverReq("b"), jsonReply(`{"master":"b","epoch":5}`), false},
			{"any node", switchoverReq(""), jsonReply(`{"master":"b","epoch":5}`), false},
		}, nil, []string{"b", ""}},
		{"switchover refused by the cluster", &fakeCluster{swErr: protocol.NewBizError(protocol.FormatNotLeader("c", "h:3"))}, []step{
			{"switchover", switchoverReq("b"), errReply("not the cluster's consensus leader; retry at the leader c h:3"), false},
		}, nil, []string{"b"}},
		{"switchover with a bad node id", &fakeCluster{}, []step{
			{"space", switchoverReq("a b"), errReply(`switchover: invalid node id "a b" (printable ASCII without spaces, at most 64 bytes)`), false},
		}, nil, nil},
		{"switchover without a cluster", &fakeFailover{}, []step{
			{"switchover", switchoverReq("b"), errReply("switchover is not available on this server: it is not one of a cluster (smss -role auto)"), false},
		}, nil, nil},
		{"switchover without a failover", nil, []step{
			{"switchover", switchoverReq("b"), errReply("switchover is not available on this server: it is not one of a cluster (smss -role auto)"), false},
		}, nil, nil},
		{"checked promote", &fakeCluster{fakeFailover: fakeFailover{epoch: 3}, checkErr: refused, warning: "writes 5..9 may be lost"}, []step{
			{"refused", promoteReq(), errReply("promote refused: behind"), false},
			{"forced", promoteForceReq(), jsonReply(`{"role":"master","epoch":3,"warning":"writes 5..9 may be lost"}`), false},
			{"unknown option", promoteOptReq("forcefully"), errReply(`promote: unknown option "forcefully" in the topic field (only "force")`), false},
		}, []bool{false, true}, nil},
		{"force on a server without the check", &fakeFailover{epoch: 2}, []step{
			{"forced", promoteForceReq(), jsonReply(`{"role":"master","epoch":2}`), false},
		}, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := startServer(t, newFakeBackend(), func(o *Options) {
				if tc.failover != nil {
					o.Failover = tc.failover
				}
			})
			runSteps(t, ts, tc.steps)
			if f, ok := tc.failover.(*fakeCluster); ok {
				f.mu2.Lock()
				defer f.mu2.Unlock()
				if len(f.forces) != len(tc.forces) || len(f.targets) != len(tc.targets) {
					t.Fatalf("calls: forces %v targets %q; want %v %q", f.forces, f.targets, tc.forces, tc.targets)
				}
				for i := range f.forces {
					if f.forces[i] != tc.forces[i] {
						t.Fatalf("forces %v, want %v", f.forces, tc.forces)
					}
				}
				for i := range f.targets {
					if f.targets[i] != tc.targets[i] {
						t.Fatalf("targets %q, want %q", f.targets, tc.targets)
					}
				}
			}
		})
	}
}
