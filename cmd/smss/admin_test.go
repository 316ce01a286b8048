package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/smssmq/smss/admin"
	"github.com/smssmq/smss/broker"
	"github.com/smssmq/smss/config"
	"github.com/smssmq/smss/metrics"
	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/replication"
)

const adminToken = "main-test-token-0123456789"

// adminGet fetches path from the admin endpoint with the token.
func adminGet(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

func TestAdminEndpointIsWired(t *testing.T) {
	in := start(t, "admin:\n  listen: 127.0.0.1:0\n  token: "+adminToken+"\n")
	line := in.out.waitLine(t, `msg="admin listening"`)
	m := addrRe.FindStringSubmatch(line)
	if m == nil || !strings.Contains(line, "auth=true") {
		t.Fatalf("admin line: %s", line)
	}
	adm := m[1]
	if strings.Contains(in.out.String(), adminToken) {
		t.Fatal("the admin token was logged")
	}

	c := dial(t, in.addr)
	create, err := protocol.AppendCreate(nil, []byte("order"), nil, 0)
	if err := roundTrip(t, c, create, err); err != nil {
		t.Fatal(err)
	}
	pub, err := protocol.AppendPub(nil, []byte("order"), nil, append(record("a"), record("bb")...))
	if err := roundTrip(t, c, pub, err); err != nil {
		t.Fatal(err)
	}

	if code, body := adminGet(t, adm, "/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz %d %s", code, body)
	}
	code, body := adminGet(t, adm, "/api/info")
	var info admin.Info
	if err := json.Unmarshal([]byte(body), &info); code != http.StatusOK || err != nil {
		t.Fatalf("/api/info %d %v %s", code, err, body)
	}
	if info.ListenAddr != in.addr || info.Role != metrics.RoleMaster || info.Version == "" || info.LastEventID != 3 ||
		info.BinlogBytes <= 0 || info.BinlogFiles != 1 || !info.Ready || info.Config["admin.token"] != config.Redacted {
		t.Fatalf("/api/info %+v", info)
	}
	// A request is observed just after its reply is written: poll.
	wants := []string{
		`smss_topic_published_messages_total{topic="order"} 2`,
		`smss_request_duration_seconds_count{command="pub"} 1`,
		`smss_group_commit_commands_count 2`,
		`smss_topics{state="normal"} 1`,
		`smss_connections_open 1`,
		`smss_info{role="master",version="` + info.Version + `"} 1`,
	}
	deadline := time.Now().Add(waitLimit)
	for {
		_, body = adminGet(t, adm, "/metrics")
		missing := ""
		for _, want := range wants {
			if !strings.Contains(body, want) {
				missing = want
				break
			}
		}
		if missing == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics lacks %s:\n%s", missing, body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if code := in.stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("exit %d", code)
	}
	// The endpoint went away with the process.
	if _, err := http.Get("http://" + adm + "/healthz"); err == nil {
		t.Fatal("admin endpoint still answers after exit")
	}
}

func TestAdminOffByDefault(t *testing.T) {
	in := start(t, "")
	in.out.waitLine(t, `msg="smss listening"`)
	if strings.Contains(in.out.String(), "admin listening") {
		t.Fatal("admin endpoint started without admin.listen")
	}
	var a *adminEndpoint // what run uses when admin.listen is ""
	if a.metrics() != nil {
		t.Fatal("metrics recorded without an admin endpoint")
	}
	a.setBroker(nil)
	a.setListen("x")
	a.setReplication(nil)
	a.shutdown()
}

func TestAdminSourceReadiness(t *testing.T) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	b, err := broker.Open(broker.Options{Dir: t.TempDir(), Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cfg := config.Default()
	cfg.Admin.Token = adminToken
	m := metrics.NewWithOptions(metrics.Options{NoRuntime: true})

	s := newAdminSource(cfg, roleMaster, m)
	steps := []struct {
		do   func()
		why  string // "" = ready
		name string
	}{
		{func() {}, "recovering", "before the broker is open"},
		{func() { s.b.Store(b) }, "listener not started", "before listening"},
		{func() { addr := "127.0.0.1:1"; s.listen.Store(&addr) }, "", "serving"},
	}
	for _, st := range steps {
		st.do()
		ok, why := s.ready()
		if ok != (st.why == "") || !strings.Contains(why, st.why) {
			t.Errorf("%s: ready %v %q, want %q", st.name, ok, why, st.why)
		}
	}
	if _, err := newAdminSource(cfg, roleMaster, m).Topics(); !errors.Is(err, errRecovering) {
		t.Errorf("topics while recovering: %v", err)
	}
	if in := s.ServerInfo(); in.Config["admin.token"] != config.Redacted || in.ListenAddr != "127.0.0.1:1" || in.Role != roleMaster {
		t.Errorf("server info %+v", in)
	}

	// A slave is ready only while its replica stream is open. The role is
	// the broker's (a slave may be promoted).
	sb, err := broker.Open(broker.Options{Dir: t.TempDir(), Logger: logger, Slave: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	sl := newAdminSource(cfg, roleSlave, m)
	sl.b.Store(sb)
	addr := "127.0.0.1:2"
	sl.listen.Store(&addr)
	if ok, why := sl.ready(); ok || !strings.Contains(why, "replication not started") {
		t.Errorf("slave without replication: %v %q", ok, why)
	}
	if r := sl.Replication(); r.Role != metrics.RoleSlave || r.Master != nil {
		t.Errorf("slave replication before start %+v", r)
	}
	if _, err := sb.Promote(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ok, why := sl.ready(); !ok {
		t.Errorf("promoted slave not ready: %q", why)
	}
	if in := sl.ServerInfo(); in.Role != roleMaster || in.Epoch != 1 {
		t.Errorf("promoted slave's info: role %s epoch %d", in.Role, in.Epoch)
	}
}

func TestLinkStateAndSessionErrors(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		st   replication.Status
		want string
	}{
		{replication.Status{State: replication.StateStreaming}, metrics.LinkStreaming},
		{replication.Status{State: replication.StateSyncing}, metrics.LinkConnecting},
		{replication.Status{State: replication.StateConnecting}, metrics.LinkConnecting},
		{replication.Status{State: replication.StateConnecting, LastError: "refused", NextRetry: now.Add(time.Minute)}, metrics.LinkRetrying},
		{replication.Status{State: replication.StateConnecting, LastError: "refused", NextRetry: now.Add(-time.Second)}, metrics.LinkConnecting},
		{replication.Status{State: replication.StateStopped}, metrics.LinkStopped},
	} {
		if got := linkState(tc.st); got != tc.want {
			t.Errorf("%+v: %s, want %s", tc.st, got, tc.want)
		}
	}

	m := metrics.NewWithOptions(metrics.Options{NoRuntime: true})
	s := newAdminSource(config.Default(), roleSlave, m)
	count := func() float64 {
		t.Helper()
		mfs, err := m.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "smss_errors_total" {
				continue
			}
			for _, x := range mf.GetMetric() {
				if x.GetLabel()[0].GetValue() == metrics.KindReplication {
					return x.GetCounter().GetValue()
				}
			}
		}
		return -1
	}
	s.countSessionErrors(replication.Status{Reconnects: 2})
	s.countSessionErrors(replication.Status{Reconnects: 2}) // nothing new
	s.countSessionErrors(replication.Status{Reconnects: 3, State: replication.StateStopped, LastError: "400"})
	s.countSessionErrors(replication.Status{Reconnects: 3, State: replication.StateStopped, LastError: "400"})
	if got := count(); got != 4 {
		t.Fatalf("replication errors %v, want 4 (3 sessions + the stop)", got)
	}
}

// TestSlaveLagSeconds: the lag is how old the last applied block was when
// it was applied, and 0 once a later frame (an alive) came.
func TestSlaveLagSeconds(t *testing.T) {
	ctx := t.Context()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	m, err := broker.Open(broker.Options{Dir: t.TempDir(), Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s, err := broker.Open(broker.Options{Dir: t.TempDir(), Logger: logger, Slave: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := &replicaRunner{}
	if got := r.lagSeconds(s, replication.Status{}); got != 0 {
		t.Fatalf("lag before any apply %v", got)
	}
	if _, err := m.CreateTopic(ctx, []byte("t"), 0); err != nil {
		t.Fatal(err)
	}
	st, err := m.ReplicaStream(0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var last int64
	if _, err := st.Next(ctx, 10, time.Millisecond, func(b []byte) error {
		last, err = s.ApplyReplicated(ctx, append([]byte(nil), b...))
		return err
	}); err != nil || last == 0 {
		t.Fatalf("replicate: %d %v", last, err)
	}
	wt, id, ok := lastBinlogBlock(s)
	if !ok || id != last || wt <= 0 {
		t.Fatalf("last binlog block %d %d %v", wt, id, ok)
	}
	// Applied 2.5 s after the master wrote it; the data frame's own time
	// follows the apply at once.
	appliedAt := time.UnixMilli(wt + 2500)
	r.applied.Store(last)
	r.appliedAt.Store(appliedAt.UnixNano())
	if got := r.lagSeconds(s, replication.Status{LastFrameAt: appliedAt.Add(time.Millisecond)}); got != 2.5 {
		t.Errorf("lag after a late apply %v, want 2.5", got)
	}
	if got := r.lagSeconds(s, replication.Status{LastFrameAt: appliedAt.Add(time.Second)}); got != 0 {
		t.Errorf("lag after an alive %v, want 0", got)
	}
	r.applied.Store(last + 5) // the binlog does not end with that apply
	if got := r.lagSeconds(s, replication.Status{LastFrameAt: appliedAt}); got != 0 {
		t.Errorf("lag for an unknown block %v, want 0", got)
	}
}
