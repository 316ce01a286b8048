package admin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image/png"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	smssclient "github.com/smssmq/smss/client"
	"github.com/smssmq/smss/e2e/internal/kit"
)

// publishedPixels counts the pixels of the throughput chart drawn in the
// "published" series' colour (#2f6fde) inside the plot area, above the
// band where a zero line runs. The bounds mirror LineChart in
// admin/web/app.js: the legend sits in the top 20 CSS px and the x axis 20
// px above the bottom. Before any publish the series is a flat zero line,
// so it counts nothing; once a second with traffic is plotted the line
// climbs into the area.
const publishedPixels = `
	const c = document.getElementById("c-tput"), dpr = window.devicePixelRatio || 1;
	const top = Math.ceil(22 * dpr), bottom = c.height - Math.ceil(26 * dpr);
	if (bottom <= top) return 0;
	const d = c.getContext("2d").getImageData(0, top, c.width, bottom - top).data;
	let n = 0;
	for (let i = 0; i < d.length; i += 4) if (d[i + 3] > 0 && d[i + 2] > 150 && d[i + 2] - d[i] > 80) n++;
	return n;`

// equalSeriesPixels draws the throughput chart's two series (published
// blue, delivered orange) with identical values, with the page's LineChart
// on a canvas of its own, and counts the pixels of each colour in the plot
// area.
const equalSeriesPixels = `
	const cv = document.createElement("canvas");
	cv.style.cssText = "width:600px;height:180px;display:block";
	document.body.appendChild(cv);
	// The throughput chart's own series (colours, dashes, order), fed
	// the same value.
	const ch = new LineChart(cv, charts.tput.series.map((s) => ({ ...s, get: (p) => p.v })), (v) => String(v));
	const now = Date.now(), pts = [];
	for (let i = 0; i <= 120; i++) pts.push({ time: now - 120000 + i * 1000, v: 100 + (i % 9) * 20 });
	ch.setPoints(pts);
	const dpr = window.devicePixelRatio || 1;
	const top = Math.ceil(22 * dpr), bottom = cv.height - Math.ceil(26 * dpr);
	const d = cv.getContext("2d").getImageData(0, top, cv.width, bottom - top).data;
	let first = 0, second = 0;
	for (let i = 0; i < d.length; i += 4) {
		if (d[i + 3] < 200) continue;
		if (d[i + 2] > 150 && d[i + 2] - d[i] > 80) first++;
		if (d[i] > 180 && d[i] - d[i + 2] > 100) second++;
	}
	cv.remove();
	return { first, second };`

// topicRow finds the topic table's row of a topic (cells: name, state,
// messages, size, in/s, out/s, subs, last eventId, expires). The messages
// cell is not checked: the broker does not count messages on disk
// (metrics.TopicStats.Messages is -1), so it shows "–".
const topicRow = `
	const row = (name) => [...document.querySelectorAll("#topics tbody tr")]
		.find((tr) => tr.querySelector("td.name") && tr.querySelector("td.name").textContent === name);
	const num = (s) => Number(s.replace(/,/g, ""));`

// TestDashboardBrowserAgainstServer drives the dashboard of the real binary
// in headless Chromium: sign in through the page (a wrong token first),
// see topics created over TCP in the topic table, publish and subscribe
// over TCP, and watch the throughput chart gain points with published
// traffic (in the page's data and in the canvas pixels), and the KPIs, the
// topic's rates, size and last eventId and the subscriber table follow.
//
// It ends with a screenshot: into a temporary directory, or, with
// SMSS_DASHBOARD_SCREENSHOT set, into admin/doc/dashboard-real.png (the
// picture of a real server in docs/operations.md; SMSS_DASHBOARD_SOAK=150s keeps traffic
// going that long first so the charts fill).
func TestDashboardBrowserAgainstServer(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	driverPath, chromePath := browserBinaries(t)

	dir := t.TempDir()
	// Stored positions written only when a subscription ends, so that the
	// eventIds this test follows are its publisher's own.
	kit.WriteConfig(t, dir, kit.AdminConfig(kit.AdminToken)+"cursor:\n  flushMs: 600000\n")
	p := kit.Start(t, dir)
	adm := kit.AdminAddr(t, p)
	t.Cleanup(func() {
		if t.Failed() {
			out := p.Out.String()
			t.Logf("server output (tail):\n%s", out[max(0, len(out)-4000):])
		}
	})

	pub := kit.NewPublisher(t, p.Addr)
	pub.Create("orders")

	br := startBrowser(t, driverPath, chromePath)
	br.dumpOnFailure(t)
	if err := br.open("http://" + adm + "/"); err != nil {
		t.Fatal(err)
	}

	// Sign in through the form: a wrong token is refused, the right one
	// opens the dashboard.
	br.waitFor(t, "the login prompt", `return !document.getElementById("login").hidden`, 10*time.Second, nil)
	submit := `document.getElementById("login-token").value = arguments[0];
		document.getElementById("login-form").requestSubmit(); return true`
	if _, err := br.exec(submit, "not-the-token-0123456789"); err != nil {
		t.Fatal(err)
	}
	br.waitFor(t, "the wrong token to be refused",
		`return document.getElementById("login-error").textContent === "Wrong token." && !document.getElementById("login").hidden`,
		10*time.Second, nil)
	if _, err := br.exec(submit, kit.AdminToken); err != nil {
		t.Fatal(err)
	}
	br.waitFor(t, "the topic table to list orders and the event stream to be live", topicRow+`
		return document.getElementById("login").hidden && !!row("orders") &&
			document.querySelector("#live span").textContent === "live" &&
			document.getElementById("role").textContent === "master"`, 15*time.Second, nil)

	// No KPI card cuts its text (the replication card's "no slave
	// connected" was cut at 1400 px).
	br.waitFor(t, "the replication card to be filled", `
		return document.getElementById("k-repl-sub").textContent !== "–"`, 10*time.Second, nil)
	cut, err := br.exec(`
		return [...document.querySelectorAll(".kpi .value, .kpi .sub")].filter((e) =>
			e.scrollWidth > e.clientWidth + 1).map((e) => e.id + ": " + e.textContent + " (" + e.scrollWidth + " > " + e.clientWidth + ")")`)
	if err != nil {
		t.Fatal(err)
	}
	if l, _ := cut.([]any); len(l) > 0 {
		t.Fatalf("KPI texts cut off: %v", l)
	}

	// Two series with equal values both stay visible: the chart of the
	// page drawing the same points twice shows both colours.
	eq, err := br.exec(equalSeriesPixels)
	if err != nil {
		t.Fatal(err)
	}
	if px, _ := eq.(map[string]any); px == nil || px["first"].(float64) < 100 || px["second"].(float64) < 100 {
		t.Fatalf("equal series drawn: %v pixels of each colour, want both visible", eq)
	}

	// A topic created while the page is open appears with the table's
	// periodic refresh.
	pub.Create("payments")
	br.waitFor(t, "the topic table to list payments", topicRow+`return !!row("payments")`, 15*time.Second, nil)

	v, err := br.exec(topicRow + `
		const pts = state.points;
		return {points: pts.length, lastPoint: pts.length ? pts[pts.length - 1].time : 0,
			pixels: (() => {` + publishedPixels + `})(), last: row("orders").children[7].textContent,
			size: row("orders").children[3].textContent}`)
	if err != nil {
		t.Fatal(err)
	}
	base, _ := v.(map[string]any)
	if base == nil || base["last"] != "–" || base["size"] != "0 B" {
		t.Fatalf("before any publish the page shows %v", v)
	}
	t.Logf("before traffic: %v", base)

	// A subscriber, so that delivered traffic and the subscriber table
	// show too.
	subCtx, cancelSub := context.WithCancel(context.Background())
	subDone := make(chan error, 1)
	sub, err := smssclient.NewSubscriber(p.Addr, smssclient.SubscriberConfig{Topic: "orders", Who: "billing", BatchSize: 64,
		MinBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
		Handler: func(context.Context, []smssclient.Delivery) smssclient.AckAction { return smssclient.Ack }})
	if err != nil {
		t.Fatal(err)
	}
	go func() { subDone <- sub.Run(subCtx) }()
	t.Cleanup(func() {
		cancelSub()
		if err := <-subDone; !errors.Is(err, context.Canceled) {
			t.Errorf("subscriber: %v", err)
		}
	})

	// Traffic flows while the page is watched: every poll publishes a few
	// batches (a few hundred messages a second).
	n, batch := 0, 0
	traffic := func() {
		for range 3 {
			recs := make([][]byte, 8)
			for i := range recs {
				recs[i] = orderRecord(n + i)
			}
			pub.Pub("orders", recs...)
			n += len(recs)
			if batch++; batch%4 == 0 {
				pub.Pub("payments", orderRecord(batch))
			}
		}
	}
	br.waitFor(t, "the throughput chart to plot new points with published traffic", fmt.Sprintf(`
		const fresh = state.points.filter((p) => p.time > %v && p.rates.msgsPerSec > 0);
		const drawn = Number(document.getElementById("c-tput").dataset.points) === state.points.length;
		return fresh.length >= 3 && drawn && (() => {`+publishedPixels+`})() > %v + 20`,
		base["lastPoint"], base["pixels"]), 20*time.Second, traffic)
	br.waitFor(t, "the published and delivered rates in the KPIs and the topic row", topicRow+`
		const r = row("orders");
		return /^[1-9]/.test(document.getElementById("k-in").textContent) &&
			/^[1-9]/.test(document.getElementById("k-out").textContent) &&
			/^[1-9]/.test(r.children[4].textContent) && /^[1-9]/.test(r.children[5].textContent)`,
		10*time.Second, traffic)
	br.waitFor(t, "the subscriber table to list billing on orders", `
		return [...document.querySelectorAll("#subs tbody tr")].some((tr) =>
			tr.children.length === 4 && tr.children[0].textContent === "orders" && tr.children[1].textContent === "billing")`,
		10*time.Second, traffic)

	// With publishing paused, the table's next refresh shows the eventId
	// of the last message published to orders and its grown size.
	sent := pub.Topics["orders"]
	lastID := sent[len(sent)-1].ID
	br.waitFor(t, fmt.Sprintf("the orders row to show last eventId %d", lastID), topicRow+fmt.Sprintf(`
		const r = row("orders");
		return num(r.children[7].textContent) === %d && /KiB|MiB/.test(r.children[3].textContent)`, lastID),
		15*time.Second, nil)

	// Traffic again for the picture, until the rates show it.
	soak, _ := time.ParseDuration(os.Getenv("SMSS_DASHBOARD_SOAK"))
	shot := filepath.Join(t.TempDir(), "dashboard.png")
	if os.Getenv("SMSS_DASHBOARD_SCREENSHOT") != "" {
		shot = filepath.Join("..", "..", "admin", "doc", "dashboard-real.png")
		soakTraffic(t, pub, soak)
	}
	br.waitFor(t, "the orders rate to show traffic again", topicRow+`return /^[1-9]/.test(row("orders").children[4].textContent)`,
		10*time.Second, traffic)

	img, err := br.screenshot()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(img))
	if err != nil || cfg.Width < 1000 || cfg.Height < 700 {
		t.Fatalf("screenshot: %dx%d, %v", cfg.Width, cfg.Height, err)
	}
	if err := os.WriteFile(shot, img, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot (%dx%d) written to %s", cfg.Width, cfg.Height, shot)
}

// orderRecord is a plausible message: a header and a JSON body of a few
// hundred bytes.
func orderRecord(i int) []byte {
	body := fmt.Sprintf(`{"order":%d,"customer":"c-%04d","items":[{"sku":"sku-%03d","qty":%d}],"note":%q}`,
		i, i%9973, i%997, 1+i%5, strings.Repeat("x", 64+i%128))
	return kit.Record([][2]string{{"content-type", "application/json"}}, body)
}

// soakTraffic publishes for d at a rate that swells and ebbs, so that a
// screenshot's charts show the shape of real traffic rather than a step.
func soakTraffic(t *testing.T, pub *kit.Publisher, d time.Duration) {
	t.Helper()
	if d <= 0 {
		return
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	began := time.Now()
	for n := 0; time.Since(began) < d; n++ {
		<-tick.C
		phase := time.Since(began).Seconds() / 40 * 2 * math.Pi
		size := 4 + int(6*(1+math.Sin(phase)))
		recs := make([][]byte, size)
		for i := range recs {
			recs[i] = orderRecord(n*16 + i)
		}
		pub.Pub("orders", recs...)
		if n%5 == 0 {
			pub.Pub("payments", orderRecord(n))
		}
	}
}
