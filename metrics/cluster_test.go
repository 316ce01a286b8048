package metrics_test

import (
	"context"
	"testing"

	"github.com/smssmq/smss/metrics"
	"github.com/smssmq/smss/metrics/metricstest"
)

// clusterFake is a Source of a cluster node (ok true) or of a node that
// could be one but is not (ok false).
type clusterFake struct {
	*metricstest.Fake
	info metrics.ClusterInfo
	ok   bool
}

func (f *clusterFake) Cluster() (metrics.ClusterInfo, bool) { return f.info, f.ok }
func (f *clusterFake) ClusterReport(context.Context) (metrics.ClusterReportInfo, bool) {
	return metrics.ClusterReportInfo{}, f.ok
}

var clusterSeries = []string{"smss_cluster_epoch", "smss_cluster_state_version", "smss_cluster_is_master", "smss_cluster_is_raft_leader",
	"smss_cluster_lease_valid", "smss_cluster_fenced", "smss_cluster_in_sync_members", "smss_cluster_blocked"}

func TestClusterGauges(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  metrics.Source
		want map[string]float64 // nil: no cluster series at all
	}{
		{"not a cluster source", metricstest.NewFake(fakeState()), nil},
		{"a cluster source, not in a cluster", &clusterFake{Fake: metricstest.NewFake(fakeState())}, nil},
		{"the master, raft leader", &clusterFake{Fake: metricstest.NewFake(fakeState()), ok: true,
			info: metrics.ClusterInfo{Epoch: 4, Version: 17, IsMaster: true, IsLeader: true, LeaseValid: true, InSync: 2}},
			map[string]float64{"smss_cluster_epoch": 4, "smss_cluster_state_version": 17, "smss_cluster_is_master": 1, "smss_cluster_is_raft_leader": 1,
				"smss_cluster_lease_valid": 1, "smss_cluster_fenced": 0, "smss_cluster_in_sync_members": 2, "smss_cluster_blocked": 0}},
		{"a fenced master, a blocked leader", &clusterFake{Fake: metricstest.NewFake(fakeState()), ok: true,
			info: metrics.ClusterInfo{Epoch: 2, Version: 3, IsMaster: true, IsLeader: true, Fenced: true, Blocked: true}},
			map[string]float64{"smss_cluster_epoch": 2, "smss_cluster_state_version": 3, "smss_cluster_is_master": 1, "smss_cluster_is_raft_leader": 1,
				"smss_cluster_lease_valid": 0, "smss_cluster_fenced": 1, "smss_cluster_in_sync_members": 0, "smss_cluster_blocked": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := metrics.NewWithOptions(metrics.Options{NoRuntime: true})
			m.SetSource(tc.src)
			f := families(t, m)
			for _, name := range clusterSeries {
				_, present := f[name]
				if tc.want == nil {
					if present {
						t.Errorf("%s exported by a node outside a cluster", name)
					}
					continue
				}
				if got := value(t, f, name, nil); got != tc.want[name] {
					t.Errorf("%s = %v, want %v", name, got, tc.want[name])
				}
			}
		})
	}
}
