package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/smssmq/smss/metrics"
	"github.com/smssmq/smss/metrics/metricstest"
	"github.com/smssmq/smss/protocol"
)

// clusterSource is the fixture's Source on a cluster node (in true) or on a
// node that is not one.
type clusterSource struct {
	*metricstest.Fake
	in bool
}

func (s clusterSource) Cluster() (metrics.ClusterInfo, bool) {
	return metrics.ClusterInfo{Epoch: 2}, s.in
}
func (s clusterSource) ClusterReport(context.Context) (metrics.ClusterReportInfo, bool) {
	if !s.in {
		return metrics.ClusterReportInfo{}, false
	}
	return metrics.ClusterReportInfo{Node: "a", LeaseValid: true, ClusterReport: protocol.ClusterReport{Epoch: 2, Master: "b", Leader: "a",
		Nodes: []protocol.ClusterNode{{Node: "a", Addr: "h:1", Reachable: true, Role: "slave", Epoch: 2, LastEventID: 9, Confirmed: 9, InSync: true, Eligible: true, Leader: true}}}}, true
}

func TestAPICluster(t *testing.T) {
	for _, tc := range []struct {
		name   string
		src    func(*testEnv) metrics.Source
		code   int
		substr string
	}{
		{"a cluster node", func(e *testEnv) metrics.Source { return clusterSource{e.fake, true} }, http.StatusOK, `"master":"b"`},
		{"a cluster-capable source outside a cluster", func(e *testEnv) metrics.Source { return clusterSource{e.fake, false} }, http.StatusNotFound, "not one of a cluster"},
		{"a plain source", func(e *testEnv) metrics.Source { return e.fake }, http.StatusNotFound, "not one of a cluster"},
		{"no source", func(*testEnv) metrics.Source { return nil }, http.StatusServiceUnavailable, "not available"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "", false, func(o *Options) {
				o.Source = nil
				if s := tc.src(&testEnv{fake: metricstest.NewFake(fixture())}); s != nil {
					o.Source = s
				}
			})
			w := e.do(http.MethodGet, "/api/cluster", "", nil)
			if w.Code != tc.code || !strings.Contains(w.Body.String(), tc.substr) {
				t.Fatalf("GET /api/cluster: %d %s; want %d with %q", w.Code, w.Body, tc.code, tc.substr)
			}
			if tc.code != http.StatusOK {
				return
			}
			var got struct {
				Node       string                 `json:"node"`
				LeaseValid bool                   `json:"leaseValid"`
				Epoch      uint64                 `json:"epoch"`
				Nodes      []protocol.ClusterNode `json:"nodes"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || got.Node != "a" || !got.LeaseValid || got.Epoch != 2 ||
				len(got.Nodes) != 1 || !got.Nodes[0].Eligible || got.Nodes[0].LastEventID != 9 {
				t.Fatalf("/api/cluster body %s: %+v %v", w.Body, got, err)
			}
		})
	}
}
