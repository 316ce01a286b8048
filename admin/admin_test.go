package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/smssmq/smss/auth"
	"github.com/smssmq/smss/metrics"
	"github.com/smssmq/smss/metrics/metricstest"
	"github.com/smssmq/smss/protocol"
)

func TestAuth(t *testing.T) {
	// Every wrong credential below is tried on every path: far more
	// guesses than the throttle allows (TestWrongTokensThrottled).
	e := newEnv(t, testToken, false, func(o *Options) { o.Throttle = auth.NewLimiter(auth.LimiterOptions{Free: 1 << 20}) })
	session := e.login(t)
	paths := []struct {
		path   string
		public bool
	}{
		{"/healthz", true},
		{"/", true},
		{"/static/app.js", true},
		{"/readyz", true},
		{"/metrics", false},
		{"/api/info", false},
		{"/api/topics", false},
		{"/api/subscribers", false},
		{"/api/replication", false},
		{"/api/cluster", false},
		{"/api/cursors", false},
		{"/api/delays", false},
		{"/api/snapshot", false},
		{"/debug/pprof/", false},
		{"/debug/pprof/cmdline", false},
		{"/debug/pprof/heap?debug=1", false},
		{"/no/such/page", false},
	}
	creds := []struct {
		name   string
		auth   string
		cookie string
		ok     bool
	}{
		{"none", "", "", false},
		{"wrong bearer", "Bearer nope", "", false},
		{"basic scheme", "Basic " + testToken, "", false},
		{"bearer", "Bearer " + testToken, "", true},
		{"bearer lower-case scheme", "bearer " + testToken, "", true},
		{"session cookie", "", session, true},
		{"forged cookie", "", testToken, false},
		{"wrong bearer beats good cookie", "Bearer nope", session, false},
	}
	for _, p := range paths {
		for _, c := range creds {
			var hdr []string
			if c.cookie != "" {
				hdr = []string{"Cookie", SessionCookie + "=" + c.cookie}
			}
			w := e.do(http.MethodGet, p.path, c.auth, nil, hdr...)
			allowed := p.public || c.ok
			if got := w.Code == http.StatusUnauthorized; got == allowed {
				t.Errorf("GET %s with %s: status %d, allowed=%v", p.path, c.name, w.Code, allowed)
			}
			if !allowed && w.Header().Get("WWW-Authenticate") == "" {
				t.Errorf("GET %s with %s: 401 without WWW-Authenticate", p.path, c.name)
			}
		}
	}
	// Authorized requests reach their handlers.
	for path, want := range map[string]int{
		"/debug/pprof/cmdline":      200,
		"/debug/pprof/heap?debug=1": 200,
		"/api/topics":               200,
		"/no/such/page":             404,
	} {
		if w := e.do(http.MethodGet, path, "Bearer "+testToken, nil); w.Code != want {
			t.Errorf("GET %s authorized: %d, want %d", path, w.Code, want)
		}
	}
}

func TestNoTokenMeansOpen(t *testing.T) {
	e := newEnv(t, "", false, nil)
	for _, p := range []string{"/api/topics", "/metrics", "/debug/pprof/cmdline", "/readyz"} {
		if w := e.do(http.MethodGet, p, "", nil); w.Code != http.StatusOK {
			t.Errorf("GET %s without token configured: %d", p, w.Code)
		}
	}
	if w := e.do(http.MethodPost, "/api/login", "", strings.NewReader("token=x"),
		"Content-Type", "application/x-www-form-urlencoded"); w.Code != http.StatusNoContent {
		t.Errorf("login without token configured: %d", w.Code)
	}
}

func TestLoginSetsSessionCookie(t *testing.T) {
	e := newEnv(t, testToken, false, nil)
	tests := []struct {
		name, ctype, body string
		want              int
	}{
		{"form wrong", "application/x-www-form-urlencoded", "token=wrong", 401},
		{"json wrong", "application/json", `{"token":"wrong"}`, 401},
		{"json broken", "application/json", `{"token":`, 400},
		{"too large", "application/x-www-form-urlencoded", "token=" + strings.Repeat("a", maxLoginBody), 413},
		{"form", "application/x-www-form-urlencoded", "token=" + url.QueryEscape(testToken), 204},
		{"json", "application/json; charset=utf-8", `{"token":"` + testToken + `"}`, 204},
	}
	for _, tc := range tests {
		w := e.do(http.MethodPost, "/api/login", "", strings.NewReader(tc.body), "Content-Type", tc.ctype)
		if w.Code != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, w.Code, tc.want)
			continue
		}
		cookies := w.Result().Cookies()
		if tc.want != 204 {
			if len(cookies) != 0 {
				t.Errorf("%s: failed login set a cookie", tc.name)
			}
			continue
		}
		if len(cookies) != 1 {
			t.Fatalf("%s: cookies %v", tc.name, cookies)
		}
		c := cookies[0]
		if c.Name != SessionCookie || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" {
			t.Errorf("%s: cookie attributes %+v", tc.name, c)
		}
		if strings.Contains(c.Value, testToken) {
			t.Errorf("%s: cookie carries the token", tc.name)
		}
		if w := e.do(http.MethodGet, "/api/info", "", nil, "Cookie", c.String()); w.Code != 200 {
			t.Errorf("%s: cookie not accepted: %d", tc.name, w.Code)
		}
	}
	w := e.do(http.MethodPost, "/api/logout", "", nil)
	if c := w.Result().Cookies(); w.Code != 204 || len(c) != 1 || c[0].MaxAge >= 0 {
		t.Errorf("logout: %d %v", w.Code, c)
	}
	if w := e.do(http.MethodGet, "/api/login", "", nil); w.Code != http.StatusUnauthorized && w.Code != http.StatusMethodNotAllowed {
		t.Errorf("GET /api/login: %d", w.Code)
	}
}

func TestReadyz(t *testing.T) {
	ready, why := false, "recovering"
	e := newEnv(t, "", false, func(o *Options) { o.Ready = func() (bool, string) { return ready, why } })
	w := e.do(http.MethodGet, "/readyz", "", nil)
	if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "recovering") {
		t.Fatalf("not ready: %d %q", w.Code, w.Body)
	}
	// Public: the details after the kind stay behind the token.
	why = "writer stopped on a fatal storage error: write /secret/path: no space left"
	if w := e.do(http.MethodGet, "/readyz", "", nil); w.Code != http.StatusServiceUnavailable ||
		w.Body.String() != "not ready: writer stopped on a fatal storage error\n" {
		t.Fatalf("not ready with details: %d %q", w.Code, w.Body)
	}
	why = "recovering"
	var in Info
	if err := json.Unmarshal(e.do(http.MethodGet, "/api/info", "", nil).Body.Bytes(), &in); err != nil || in.Ready || in.ReadyReason != "recovering" {
		t.Fatalf("info while not ready: %+v %v", in, err)
	}
	ready = true
	if w := e.do(http.MethodGet, "/readyz", "", nil); w.Code != http.StatusOK {
		t.Fatalf("ready: %d %q", w.Code, w.Body)
	}
	if w := e.do(http.MethodGet, "/healthz", "", nil); w.Code != http.StatusOK || w.Body.String() != "ok\n" {
		t.Fatalf("healthz: %d %q", w.Code, w.Body)
	}
}

func TestMetricsEndpoint(t *testing.T) {
	e := newEnv(t, testToken, false, nil)
	e.m.ObserveRequest(protocol.CmdPub, time.Millisecond, true)
	e.m.ObserveRequest(protocol.CmdPub, time.Millisecond, false)
	e.m.Published("orders", 3, 30)
	e.m.ConnOpened()
	e.m.Error(metrics.KindTimeout)
	w := e.do(http.MethodGet, "/metrics", "Bearer "+testToken, nil)
	if w.Code != 200 {
		t.Fatalf("/metrics: %d", w.Code)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(w.Body)
	if err != nil {
		t.Fatalf("parse exposition: %v", err)
	}
	// family → label set of one expected series → value (histograms: count)
	want := []struct {
		family string
		labels map[string]string
		value  float64
	}{
		{"smss_request_duration_seconds", map[string]string{"command": "pub"}, 2},
		{"smss_request_errors_total", map[string]string{"command": "pub"}, 1},
		{"smss_topic_published_messages_total", map[string]string{"topic": "orders"}, 3},
		{"smss_topic_published_bytes_total", map[string]string{"topic": "orders"}, 30},
		{"smss_connections_open", nil, 1},
		{"smss_errors_total", map[string]string{"kind": "timeout"}, 1},
		{"smss_topics", map[string]string{"state": "normal"}, 2},
		{"smss_topics", map[string]string{"state": "expired"}, 1},
		{"smss_topics", map[string]string{"state": "deleted"}, 1},
		{"smss_topic_disk_bytes", map[string]string{"topic": "orders"}, 10 << 20},
		{"smss_subscribers", nil, 3},
		{"smss_subscriber_lag_events", map[string]string{"topic": "orders", "who": "shipping"}, 1000},
		{"smss_replication_slave_lag_events", map[string]string{"slave": "10.0.0.2:41000"}, 100},
		{"smss_delayed_pending", nil, 3},
		{"smss_binlog_disk_bytes", nil, 1 << 30},
		{"smss_info", map[string]string{"version": "1.0.0", "role": "master"}, 1},
	}
	for _, w := range want {
		got, ok := findSeries(fams[w.family], w.labels)
		if !ok {
			t.Errorf("no series %s%v", w.family, w.labels)
			continue
		}
		if got != w.value {
			t.Errorf("%s%v = %v, want %v", w.family, w.labels, got, w.value)
		}
	}
}

func findSeries(mf *dto.MetricFamily, labels map[string]string) (float64, bool) {
	if mf == nil {
		return 0, false
	}
next:
	for _, m := range mf.GetMetric() {
		if len(m.GetLabel()) != len(labels) {
			continue
		}
		for _, l := range m.GetLabel() {
			if labels[l.GetName()] != l.GetValue() {
				continue next
			}
		}
		switch {
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Untyped != nil:
			return m.GetUntyped().GetValue(), true
		}
	}
	return 0, false
}

func TestJSONShapes(t *testing.T) {
	e := newEnv(t, testToken, true, nil)
	e.m.Published("orders", 7, 700)
	decode := func(path string, v any) {
		t.Helper()
		resp := get(t, e.base+path, testToken)
		defer resp.Body.Close()
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}

	var topics []map[string]any
	decode("/api/topics", &topics)
	if len(topics) != 4 {
		t.Fatalf("topics: %d entries", len(topics))
	}
	byName := map[string]map[string]any{}
	for _, tp := range topics {
		byName[tp["name"].(string)] = tp
	}
	orders := byName["orders"]
	for _, k := range []string{"name", "createTimeStamp", "expireAt", "createEventId", "stateChangeTime",
		"stateChangeEventId", "state", "topicRoot", "status", "stats", "subscribers", "counters"} {
		if _, ok := orders[k]; !ok {
			t.Errorf("topic entry lacks %q: %v", k, orders)
		}
	}
	stats := orders["stats"].(map[string]any)
	if stats["bytes"].(float64) != 10<<20 || stats["messages"].(float64) != 5000 || stats["lastEventId"].(float64) != 6000 {
		t.Errorf("orders stats: %v", stats)
	}
	if orders["subscribers"].(float64) != 2 || orders["counters"].(map[string]any)["messages"].(float64) != 7 {
		t.Errorf("orders subscribers/counters: %v", orders)
	}
	if byName["tmp"]["status"] != "expired" || byName["old"]["status"] != "deleted" || byName["audit"]["status"] != "normal" {
		t.Errorf("statuses: %v %v %v", byName["tmp"]["status"], byName["old"]["status"], byName["audit"]["status"])
	}
	if _, ok := byName["old"]["stats"]; ok {
		t.Error("deleted topic has stats")
	}

	var subs []metrics.SubscriberInfo
	decode("/api/subscribers", &subs)
	if len(subs) != 3 || subs[0].Who != "shipping" || subs[1].Who != "billing" || subs[2].Who != "archiver" {
		t.Errorf("subscribers not ordered by lag: %+v", subs)
	}
	var rawSubs []map[string]any
	decode("/api/subscribers", &rawSubs)
	for _, k := range []string{"topic", "who", "remoteAddr", "since", "startEventId", "delivered", "position", "lag"} {
		if _, ok := rawSubs[0][k]; !ok {
			t.Errorf("subscriber lacks %q", k)
		}
	}

	var repl map[string]any
	decode("/api/replication", &repl)
	if repl["role"] != "master" || len(repl["slaves"].([]any)) != 1 {
		t.Errorf("replication: %v", repl)
	}

	var delays metrics.DelayStats
	decode("/api/delays", &delays)
	if delays.Pending != 3 || len(delays.Buckets) != len(metrics.DelayBucketBounds)+1 || delays.Buckets[0].Count != 1 {
		t.Errorf("delays: %+v", delays)
	}

	var info map[string]any
	decode("/api/info", &info)
	for _, k := range []string{"version", "role", "listenAddr", "startTime", "lastEventId", "binlogBytes", "config", "now", "uptimeSeconds", "ready", "authRequired"} {
		if _, ok := info[k]; !ok {
			t.Errorf("info lacks %q", k)
		}
	}
	if up := info["uptimeSeconds"].(float64); up < 3590 || up > 3700 {
		t.Errorf("uptime from StartTime: %v", up)
	}
	if info["authRequired"] != true {
		t.Error("authRequired false with a token")
	}

	// A slave reports its link; an empty source still answers lists, not null.
	e.fake.Update(func(s *metricstest.State) {
		s.Replication = metrics.ReplicationInfo{Role: metrics.RoleSlave, Master: &metrics.MasterLink{Addr: "m:1", State: metrics.LinkRetrying, LastError: "EOF"}}
		s.Subscribers = nil
		s.Delays = metrics.DelayStats{}
	})
	decode("/api/replication", &repl)
	if repl["slaves"] == nil || repl["master"].(map[string]any)["lastError"] != "EOF" {
		t.Errorf("slave replication: %v", repl)
	}
	var rawList []any
	decode("/api/subscribers", &rawList)
	if rawList == nil {
		t.Error("no subscribers encoded as null, want []")
	}
	decode("/api/delays", &delays)
	if len(delays.Buckets) == 0 {
		t.Error("empty delay stats lost their buckets")
	}
}

func TestSourceErrorsAndAbsence(t *testing.T) {
	e := newEnv(t, "", false, nil)
	e.fake.Update(func(s *metricstest.State) { s.FailTopics = true })
	if w := e.do(http.MethodGet, "/api/topics", "", nil); w.Code != http.StatusInternalServerError || !strings.Contains(w.Body.String(), "unavailable") {
		t.Errorf("failing Topics: %d %s", w.Code, w.Body)
	}
	// The exposition survives a failing source.
	if w := e.do(http.MethodGet, "/metrics", "", nil); w.Code != 200 || !strings.Contains(w.Body.String(), "smss_source_errors_total 1") {
		t.Errorf("/metrics with failing source: %d", w.Code)
	}

	none := newEnv(t, "", false, func(o *Options) { o.Source = nil; o.Metrics = nil })
	for _, p := range []string{"/api/topics", "/api/subscribers", "/api/replication", "/api/delays"} {
		if w := none.do(http.MethodGet, p, "", nil); w.Code != http.StatusServiceUnavailable {
			t.Errorf("GET %s without source: %d", p, w.Code)
		}
	}
	if w := none.do(http.MethodGet, "/api/info", "", nil); w.Code != 200 {
		t.Errorf("info without source: %d", w.Code)
	}
	if w := none.do(http.MethodGet, "/metrics", "", nil); w.Code != 200 || !strings.Contains(w.Body.String(), "go_goroutines") {
		t.Errorf("metrics without Options.Metrics: %d", w.Code)
	}
	if w := none.do(http.MethodGet, "/api/snapshot", "", nil); w.Code != http.StatusServiceUnavailable {
		t.Errorf("snapshot before the sampler ran: %d", w.Code)
	}
}

func TestDashboardStatic(t *testing.T) {
	e := newEnv(t, testToken, false, nil)
	w := e.do(http.MethodGet, "/", "", nil)
	if w.Code != 200 || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/html") {
		t.Fatalf("/: %d %s", w.Code, w.Header().Get("Content-Type"))
	}
	body := w.Body.String()
	for _, s := range []string{`src="/static/app.js"`, `href="/static/style.css"`, `id="topics"`, `id="c-tput"`} {
		if !strings.Contains(body, s) {
			t.Errorf("index lacks %s", s)
		}
	}
	if strings.Contains(body, "http://") || strings.Contains(body, "https://") {
		t.Error("index references an external URL")
	}
	if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
		t.Errorf("CSP %q", csp)
	}
	for _, f := range []struct{ path, ctype string }{{"/static/app.js", "javascript"}, {"/static/style.css", "text/css"}} {
		w := e.do(http.MethodGet, f.path, "", nil)
		if w.Code != 200 || !strings.Contains(w.Header().Get("Content-Type"), f.ctype) {
			t.Errorf("%s: %d %s", f.path, w.Code, w.Header().Get("Content-Type"))
		}
		if strings.Contains(w.Body.String(), "https://") {
			t.Errorf("%s references an external URL", f.path)
		}
	}
}

func TestEventStream(t *testing.T) {
	e := newEnv(t, testToken, true, nil)
	// Without credentials the stream is refused like everything else.
	if resp := get(t, e.base+"/api/events", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("unauthenticated stream: %d", resp.StatusCode)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := make(chan struct{})
	go func() { // steady traffic on one topic
		tk := time.NewTicker(5 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				e.m.Published("orders", 10, 1000)
				e.m.ObserveRequest(protocol.CmdPub, 2*time.Millisecond, true)
			}
		}
	}()
	defer close(stop)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.base+"/api/events", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	evs := readEvents(t, resp.Body, 4, 5*time.Second)
	if evs[0].name != "history" {
		t.Fatalf("first event %q", evs[0].name)
	}
	var hist []Point
	if err := json.Unmarshal([]byte(evs[0].data), &hist); err != nil {
		t.Fatalf("history: %v", err)
	}
	var prev int64
	var sawTraffic bool
	for _, ev := range evs[1:] {
		if ev.name != "snapshot" {
			t.Fatalf("event %q, want snapshot", ev.name)
		}
		var s Snapshot
		if err := json.Unmarshal([]byte(ev.data), &s); err != nil {
			t.Fatalf("snapshot: %v", err)
		}
		if s.Time < prev {
			t.Fatalf("snapshot times go back: %d after %d", s.Time, prev)
		}
		prev = s.Time
		if s.SubscriberCount != 3 || s.MaxLag != 1000 || s.Subscribers[0].Who != "shipping" || s.LastEventID != 6000 || len(s.Replication.Slaves) != 1 {
			t.Fatalf("snapshot state: %+v", s)
		}
		if s.Rates.Seconds > 0 && s.Rates.MsgsPerSec > 0 {
			sawTraffic = true
			if s.Rates.PubP50Ms < 1 || s.Rates.PubP50Ms > 2.5 {
				t.Errorf("pub p50 %v ms, want within the (1, 2.5] ms bucket", s.Rates.PubP50Ms)
			}
			if len(s.Topics) != 1 || s.Topics[0].Name != "orders" || s.Topics[0].MsgsPerSec <= 0 {
				t.Errorf("topic rates: %+v", s.Topics)
			}
		}
	}
	if !sawTraffic {
		t.Fatal("no snapshot showed the published traffic")
	}

	// A second stream starts with the history accumulated so far.
	resp2 := get(t, e.base+"/api/events", testToken)
	defer resp2.Body.Close()
	h2 := readEvents(t, resp2.Body, 1, 5*time.Second)
	if err := json.Unmarshal([]byte(h2[0].data), &hist); err != nil || len(hist) == 0 {
		t.Fatalf("history of a later stream: %d points, %v", len(hist), err)
	}

	// /api/snapshot answers the same document.
	var s Snapshot
	r := get(t, e.base+"/api/snapshot", testToken)
	defer r.Body.Close()
	if err := json.NewDecoder(r.Body).Decode(&s); err != nil || s.Time == 0 {
		t.Fatalf("/api/snapshot: %+v %v", s, err)
	}
}

func TestEventStreamLimitAndShutdown(t *testing.T) {
	e := newEnv(t, "", true, func(o *Options) { o.MaxStreams = 1 })
	resp := get(t, e.base+"/api/events", "")
	defer resp.Body.Close()
	readEvents(t, resp.Body, 1, 5*time.Second)
	if r2 := get(t, e.base+"/api/events", ""); r2.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("second stream over the limit: %d", r2.StatusCode)
	}

	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done <- e.srv.Shutdown(ctx)
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Shutdown with an open stream: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Shutdown blocked by an open stream")
	}
	if err := e.srv.Start(); err != ErrClosed {
		t.Fatalf("Start after Shutdown: %v", err)
	}
}

func TestStartOptions(t *testing.T) {
	off, err := New(Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := off.Start(); err != nil || off.Addr() != "" {
		t.Fatalf("disabled server: Start %v, Addr %q", err, off.Addr())
	}
	if err := off.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Options{Listen: "no-port"}); err == nil {
		t.Fatal("New accepted an address without a port")
	}
	e := newEnv(t, "", true, nil)
	busy, _ := New(Options{Listen: e.srv.Addr(), Logger: quietLogger()})
	if err := busy.Start(); err == nil {
		t.Fatal("Start on a busy port succeeded")
	}
	if err := e.srv.Start(); err != nil {
		t.Fatalf("second Start: %v", err)
	}
}

// panickySource fails inside the sampler's calls.
type panickySource struct{ *metricstest.Fake }

func (panickySource) Subscribers() []metrics.SubscriberInfo { panic("boom") }

func TestSamplerSurvivesPanickingSource(t *testing.T) {
	e := newEnv(t, "", true, func(o *Options) { o.Source = panickySource{metricstest.NewFake(fixture())} })
	// Every sample panics, so the count keeps rising: wait for two (the
	// sampler survived the first), not for exactly two, which a poll
	// delayed past a sample interval would miss.
	panics := regexp.MustCompile(`(?m)^smss_errors_total\{kind="panic"\} (\d+)$`)
	deadline := time.After(10 * time.Second)
	for {
		w := e.do(http.MethodGet, "/metrics", "", nil)
		if m := panics.FindStringSubmatch(w.Body.String()); m != nil {
			if n, _ := strconv.Atoi(m[1]); n >= 2 {
				break
			}
		}
		select {
		case <-deadline:
			t.Fatalf("no panic counted:\n%s", w.Body.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	if resp := get(t, e.base+"/healthz", ""); resp.StatusCode != 200 {
		t.Fatalf("server down after sampler panics: %d", resp.StatusCode)
	}
}
