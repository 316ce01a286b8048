// Package admin is smss's operator endpoint: a small HTTP server (config
// admin.listen) that serves liveness and readiness probes, Prometheus
// metrics, a read-only JSON API, a live dashboard embedded in the binary,
// and net/http/pprof. The API's JSON shapes are in package adminapi; the
// terminal views of the same API that smssctl exposes as subcommands
// (RunStats, RunTop) are in package adminclient, which does not link this
// server.
//
// Endpoints:
//
//	GET  /healthz            liveness, always public
//	GET  /readyz             200 when Options.Ready says so, else 503 + the reason's kind; public
//	GET  /metrics            Prometheus exposition of the Metrics registry
//	GET  /api/info           metrics.ServerInfo + uptime + readiness
//	GET  /api/topics         []TopicView (meta, on-disk stats, counters)
//	GET  /api/subscribers    []metrics.SubscriberInfo, largest lag first
//	GET  /api/replication    metrics.ReplicationInfo
//	GET  /api/cluster        metrics.ClusterReportInfo: every node of the
//	                         cluster (smss -role auto; 404 elsewhere)
//	GET  /api/cursors        []metrics.CursorInfo: stored consumer positions
//	                         and their lag in messages (?topic=NAME: one
//	                         topic), largest lag first
//	GET  /api/queues         []protocol.QueueInfo: the work-queue groups this
//	                         master serves (?topic=NAME: one topic), most
//	                         pending first; none on a slave
//	GET  /api/delays         metrics.DelayStats
//	GET  /api/snapshot       the latest Snapshot (what /api/events pushes)
//	GET  /api/events         server-sent events: "history" once, then a
//	                         "snapshot" every Options.SampleInterval
//	POST /api/login          form or JSON {"token": …}: sets the session cookie
//	POST /api/logout         ends the session and clears the cookie
//	GET  /debug/pprof/…      net/http/pprof, on this server's own mux
//	GET  /, /static/…        the dashboard (static files, no data)
//
// Protection: with Options.Token set, every endpoint but /healthz, /readyz, the
// dashboard's static files and login/logout requires either the header
// "Authorization: Bearer <token>" or the session cookie that /api/login sets
// (HttpOnly, SameSite=Strict; its value is a random server-side session id
// that expires after Options.SessionTTL and ends at /api/logout). The
// cookie exists because a browser's EventSource cannot send headers; the
// token never travels in a URL, so it does not end up in proxy logs or
// browser history. Wrong tokens are throttled per address
// (Options.Throttle). Without a token the endpoint is open, which is why
// the listener is off by default, the start-up log warns when it is
// reachable from other hosts without one, and it then answers only
// loopback Host names (DNS rebinding).
//
// Resource bounds: Options.RequestTimeout for a request's header and body,
// a write deadline per response, Options.MaxConns open connections (more
// are closed at accept), Options.MaxBodyBytes per body.
//
// Invariants:
//   - Nothing is registered on http.DefaultServeMux; pprof handlers are
//     mounted on the server's own mux so they share its protection.
//   - One sampler goroutine (between Start and Shutdown) reads the metrics
//     and the Source once per interval and encodes the snapshot once; every
//     event stream writes those same bytes, so N dashboards cost one
//     Source read per interval, not N.
//   - The dashboard loads nothing from the network but this server.
package admin
