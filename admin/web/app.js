// smss admin dashboard. No dependencies: data from /api/*, live updates
// from the /api/events stream, charts drawn on canvas below. Every value
// that comes from the server is inserted with textContent, never as HTML.
"use strict";

const WINDOW_MS = 5 * 60 * 1000; // charts show the last 5 minutes
const MAX_POINTS = 3000;
const state = {
  points: [],          // {time, rates}
  topics: [],          // last /api/topics
  rates: new Map(),    // topic label -> TopicRate of the last snapshot
  snapshot: null,
  info: null,
  sort: { key: "bytes", desc: true },
  filter: "",
  es: null,
  timers: [],
};

// ---------- formatting ----------
const $ = (id) => document.getElementById(id);
function fmtNum(v, digits = 1) {
  if (v == null || !isFinite(v)) return "–";
  const a = Math.abs(v);
  if (a >= 1e9) return (v / 1e9).toFixed(digits) + "G";
  if (a >= 1e6) return (v / 1e6).toFixed(digits) + "M";
  if (a >= 1e4) return (v / 1e3).toFixed(digits) + "k";
  if (a >= 100 || Number.isInteger(v)) return Math.round(v).toLocaleString("en-US");
  return v.toFixed(digits);
}
function fmtInt(v) { return v == null || v < 0 ? "–" : Math.round(v).toLocaleString("en-US"); }
function fmtBytes(v) {
  if (v == null || v < 0 || !isFinite(v)) return "–";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
  return (i === 0 ? Math.round(v) : v.toFixed(v >= 100 ? 0 : 1)) + " " + u[i];
}
function fmtMs(v) {
  if (v == null || v < 0) return "–";
  if (v >= 1000) return (v / 1000).toFixed(2) + " s";
  if (v >= 10) return v.toFixed(0) + " ms";
  if (v >= 1) return v.toFixed(1) + " ms";
  return v.toFixed(2) + " ms";
}
// "0.41 / 3.2 ms": one unit for both when they share it.
function fmtLatPair(a, b) {
  if (a < 0 || b < 0 || a == null || b == null) return "–";
  const x = fmtMs(a), y = fmtMs(b);
  const ua = x.split(" ")[1], ub = y.split(" ")[1];
  return ua === ub ? x.split(" ")[0] + " / " + y : x + " / " + y;
}
function fmtDur(sec) {
  if (sec == null || sec < 0) return "–";
  sec = Math.floor(sec);
  const d = Math.floor(sec / 86400), h = Math.floor(sec % 86400 / 3600), m = Math.floor(sec % 3600 / 60), s = sec % 60;
  if (d) return d + "d " + h + "h";
  if (h) return h + "h " + m + "m";
  if (m) return m + "m " + s + "s";
  return s + "s";
}
function fmtTime(ms) {
  if (!ms) return "–";
  const d = new Date(ms), p = (n) => String(n).padStart(2, "0");
  return d.getFullYear() + "-" + p(d.getMonth() + 1) + "-" + p(d.getDate()) + " " + p(d.getHours()) + ":" + p(d.getMinutes());
}
function fmtRelative(ms) {
  if (!ms) return "never";
  const s = (ms - Date.now()) / 1000;
  return s >= 0 ? "in " + fmtDur(s) : fmtDur(-s) + " ago";
}

// ---------- DOM helpers ----------
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  if (attrs) for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v; else if (k === "title") e.title = v; else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(c == null ? "" : String(c)));
  return e;
}
function setText(id, v, cls) {
  const e = $(id);
  e.textContent = v;
  if (cls !== undefined) e.className = "value" + (cls ? " " + cls : "");
}
function replaceRows(tbody, rows, cols, emptyText) {
  tbody.replaceChildren(...(rows.length ? rows : [el("tr", null, el("td", { class: "empty", colspan: String(cols) }, emptyText))]));
}
function lagCell(lag, max) {
  const frac = max > 0 ? Math.min(1, lag / max) : 0;
  const level = lag > 10000 ? "bad" : lag > 100 ? "warn" : "";
  const bar = el("b", { class: level });
  bar.style.width = (lag > 0 ? Math.max(4, frac * 100) : 0) + "%";
  return el("td", { class: "num" }, el("span", { class: "lag" }, fmtInt(lag), el("span", { class: "meter" }, bar)));
}

// ---------- API ----------
class Unauthorized extends Error {}
async function api(path) {
  const r = await fetch(path, { credentials: "same-origin", headers: { Accept: "application/json" } });
  if (r.status === 401) throw new Unauthorized();
  if (!r.ok) {
    let msg = r.status + " " + r.statusText;
    try { msg = (await r.json()).error || msg; } catch (_) { /* keep status text */ }
    throw new Error(path + ": " + msg);
  }
  return r.json();
}

// ---------- charts ----------
// LineChart draws time series on a canvas: nice y ticks, mm:ss x labels, a
// legend with the latest values. Negative values (no data) are gaps.
class LineChart {
  constructor(canvas, series, fmt, opts = {}) {
    this.c = canvas;
    this.series = series; // [{label, color, dash, get(point)}]
    this.fmt = fmt;
    this.log = !!opts.log; // logarithmic y axis (latencies span decades)
    this.points = [];
    new ResizeObserver(() => this.draw()).observe(canvas);
  }
  setPoints(points) { this.points = points; this.c.dataset.points = String(points.length); this.draw(); }
  draw() {
    const c = this.c, dpr = window.devicePixelRatio || 1;
    const w = c.clientWidth, h = c.clientHeight;
    if (!w || !h) return;
    if (c.width !== Math.round(w * dpr) || c.height !== Math.round(h * dpr)) {
      c.width = Math.round(w * dpr); c.height = Math.round(h * dpr);
    }
    const g = c.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, h);
    g.font = "11px system-ui, sans-serif";
    const pad = { l: 52, r: 12, t: 22, b: 20 };
    const pw = w - pad.l - pad.r, ph = h - pad.t - pad.b;
    const pts = this.points;
    const now = pts.length ? pts[pts.length - 1].time : Date.now();
    const t0 = now - WINDOW_MS;

    let max = 0, min = Infinity;
    for (const p of pts) for (const s of this.series) {
      const v = s.get(p);
      if (v > max) max = v;
      if (v > 0 && v < min) min = v;
    }
    const x = (t) => pad.l + (t - t0) / (now - t0) * pw;
    let ticks, y;
    if (this.log) {
      ticks = logTicks(min, max);
      const lo = Math.log10(ticks[0]), hi = Math.log10(ticks[ticks.length - 1]);
      y = (v) => pad.t + ph - (Math.log10(v) - lo) / (hi - lo) * ph;
    } else {
      ticks = niceTicks(max);
      const ymax = ticks[ticks.length - 1] || 1;
      y = (v) => pad.t + ph - v / ymax * ph;
    }

    // grid and y labels
    g.strokeStyle = "#e3e6eb"; g.fillStyle = "#6b7383"; g.lineWidth = 1; g.textAlign = "right"; g.textBaseline = "middle";
    for (const tv of ticks) {
      const yy = Math.round(y(tv)) + 0.5;
      g.beginPath(); g.moveTo(pad.l, yy); g.lineTo(pad.l + pw, yy); g.stroke();
      g.fillText(this.fmt(tv), pad.l - 6, yy);
    }
    // x labels every minute
    g.textAlign = "center"; g.textBaseline = "top";
    for (let m = 0; m <= 5; m++) {
      const t = now - m * 60000, xx = x(t);
      if (xx < pad.l - 1) continue;
      g.fillText(m === 0 ? "now" : "-" + m + "m", xx, pad.t + ph + 5);
    }
    if (!pts.length) {
      g.textAlign = "center"; g.textBaseline = "middle";
      g.fillText("waiting for data…", pad.l + pw / 2, pad.t + ph / 2);
    }
    // lines
    g.save();
    g.beginPath(); g.rect(pad.l, pad.t - 2, pw, ph + 4); g.clip();
    // Earlier series are drawn wider, later ones thinner on top of them
    // (and dashed when they say so): series with equal values, e.g.
    // published and delivered at a steady rate, then show as a wide line
    // with a thin one inside it instead of one line hiding the other.
    const n = this.series.length;
    this.series.forEach((s, i) => {
      g.strokeStyle = s.color; g.lineWidth = 1.6 + 1.6 * (n - 1 - i); g.lineJoin = "round";
      g.setLineDash(s.dash ? [5, 3] : []);
      g.beginPath();
      let pen = false, prevT = 0;
      for (const p of pts) {
        const v = s.get(p);
        // a missing value or a hole in the stream (reconnect) breaks the line
        const missing = v == null || v < 0 || (this.log && v <= 0);
        if (missing || (pen && p.time - prevT > 5000)) { pen = false; if (missing) continue; }
        const xx = x(p.time), yy = y(v);
        if (pen) g.lineTo(xx, yy); else g.moveTo(xx, yy);
        pen = true; prevT = p.time;
      }
      g.stroke();
    });
    g.restore();
    // legend with the latest values
    g.setLineDash([]);
    let lx = pad.l; g.textAlign = "left"; g.textBaseline = "middle";
    const last = pts[pts.length - 1];
    for (const s of this.series) {
      g.fillStyle = s.color; g.fillRect(lx, 7, 10, 3);
      const v = last ? s.get(last) : null;
      const text = s.label + " " + (v == null || v < 0 ? "–" : this.fmt(v));
      g.fillStyle = "#1d2330"; g.fillText(text, lx + 14, 9);
      lx += 14 + g.measureText(text).width + 18;
    }
  }
}
// logTicks returns the decades covering [min, max] (at least two).
function logTicks(min, max) {
  if (!(max > 0) || !isFinite(min)) return [0.1, 1, 10];
  let lo = Math.floor(Math.log10(min)), hi = Math.ceil(Math.log10(max));
  if (hi <= lo) hi = lo + 1;
  const out = [];
  for (let e = lo; e <= hi; e++) out.push(+Math.pow(10, e).toPrecision(3));
  return out;
}
function niceTicks(max) {
  if (!(max > 0)) return [0, 1];
  const raw = max / 4, mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map((f) => f * mag).find((s) => s >= raw);
  const out = [];
  for (let v = 0; v <= max + step * 0.999; v += step) out.push(+v.toPrecision(6));
  if (out[out.length - 1] < max) out.push(out[out.length - 1] + step);
  return out;
}

const charts = {};
function setupCharts() {
  charts.tput = new LineChart($("c-tput"), [
    { label: "published", color: "#2f6fde", get: (p) => p.rates.msgsPerSec },
    { label: "delivered", color: "#e0822d", dash: true, get: (p) => p.rates.deliveredMsgsPerSec },
  ], (v) => fmtNum(v));
  charts.lat = new LineChart($("c-lat"), [
    { label: "p50", color: "#2e9e5b", get: (p) => p.rates.p50Ms },
    { label: "p99", color: "#d64545", get: (p) => p.rates.p99Ms },
    { label: "pub p99", color: "#8a63d2", dash: true, get: (p) => p.rates.pubP99Ms },
  ], (v) => fmtMs(v), { log: true });
}
function redrawCharts() {
  charts.tput.setPoints(state.points);
  charts.lat.setPoints(state.points);
}

// ---------- rendering ----------
function renderInfo(info) {
  state.info = info;
  const role = (info.role || "?").toLowerCase();
  const badge = $("role");
  badge.textContent = role; badge.className = "badge " + role;
  badge.title = "promotion epoch " + (info.epoch || 0);
  $("version").textContent = info.version ? "v" + String(info.version).replace(/^v/, "") : "";
  $("listen").textContent = info.listenAddr || "";
  $("logout").hidden = !info.authRequired;
  state.startTime = info.startTime || (info.now - info.uptimeSeconds * 1000);
  state.clockSkew = info.now - Date.now();
  renderReady(info.ready, info.readyReason);
  tickUptime();
}
function tickUptime() {
  if (state.startTime) $("uptime").textContent = fmtDur((Date.now() + (state.clockSkew || 0) - state.startTime) / 1000);
}
function renderReady(ok, why) {
  const r = $("ready");
  r.className = "status " + (ok ? "ok" : "bad");
  r.lastChild.textContent = ok ? "ready" : "not ready" + (why ? ": " + why : "");
  r.title = why || "";
}
function setLive(cls, text) {
  const l = $("live");
  l.className = "status " + cls;
  l.lastChild.textContent = text;
}

function renderSnapshot(s) {
  state.snapshot = s;
  const r = s.rates;
  setText("k-in", fmtNum(r.msgsPerSec) + " msg/s");
  $("k-in-b").textContent = fmtBytes(r.bytesPerSec) + "/s · " + fmtNum(r.publishesPerSec) + " pub/s";
  setText("k-out", fmtNum(r.deliveredMsgsPerSec) + " msg/s");
  $("k-out-b").textContent = fmtBytes(r.deliveredBytesPerSec) + "/s";
  setText("k-lat", fmtLatPair(r.p50Ms, r.p99Ms), r.p99Ms > 250 ? "bad" : r.p99Ms > 50 ? "warn" : "");
  $("k-req").textContent = fmtNum(r.requestsPerSec) + " req/s";
  $("k-req").title = "pub p50 " + fmtMs(r.pubP50Ms) + ", p99 " + fmtMs(r.pubP99Ms);
  setText("k-conns", fmtInt(r.connections));
  setText("k-subs", fmtInt(s.subscriberCount));
  $("k-maxlag").textContent = "max lag " + fmtInt(s.maxLag);
  $("lastid").textContent = fmtInt(s.lastEventId);
  renderReady(s.ready, s.readyReason);

  state.rates = new Map(s.topics.map((t) => [t.name, t]));
  renderSubscribers(s);
  renderReplication(s.replication);
  renderTopics();
}

function renderSubscribers(s) {
  const subs = s.subscribers || [];
  const max = subs.reduce((m, x) => Math.max(m, x.lag), 0);
  const rows = subs.map((x) => el("tr", null,
    el("td", { class: "name", title: x.topic }, x.topic),
    el("td", { class: "name", title: x.who + "\n" + (x.remoteAddr || "") + "\nsince " + fmtTime(x.since) +
      "\ndelivered " + fmtInt(x.delivered) }, x.who),
    el("td", { class: "num" }, fmtInt(x.position)),
    lagCell(x.lag, max)));
  replaceRows($("subs").tBodies[0], rows, 4, "no live subscribers");
  $("subs-note").textContent = s.subscriberCount > subs.length ? subs.length + " of " + s.subscriberCount + ", largest lag first" : "";
}

function renderReplication(r) {
  const box = $("repl");
  if (!r || !r.role) { box.replaceChildren(el("div", { class: "muted" }, "no data")); return; }
  if (r.role === "slave") {
    const m = r.master || {};
    const ok = m.state === "streaming";
    setText("k-repl", ok ? "streaming" : (m.state || "unknown"), ok ? "" : "bad");
    $("k-repl-sub").textContent = "lag " + (m.lagEvents >= 0 ? fmtInt(m.lagEvents) + " events · " : "") + (m.lagSeconds || 0).toFixed(1) + " s";
    $("repl-note").textContent = "slave of " + (m.addr || "?");
    const dl = el("dl", { class: "kv" });
    const add = (k, v) => dl.append(el("dt", null, k), el("dd", null, v));
    add("master", m.addr || "–");
    add("state", m.state || "–");
    add("applied eventId", fmtInt(m.position));
    add("lag", (m.lagEvents >= 0 ? fmtInt(m.lagEvents) + " events, " : "") + (m.lagSeconds || 0).toFixed(1) + " s");
    add("last contact", m.lastContact ? fmtRelative(m.lastContact) : "never");
    if (m.lastError) add("last error", m.lastError);
    box.replaceChildren(dl);
    return;
  }
  const slaves = r.slaves || [];
  const max = slaves.reduce((m, x) => Math.max(m, x.lagEvents), 0);
  setText("k-repl", slaves.length + (slaves.length === 1 ? " slave" : " slaves"), "");
  $("k-repl-sub").textContent = slaves.length ? "max lag " + fmtInt(max) + " events" : "no slave connected";
  $("repl-note").textContent = "master";
  if (!slaves.length) { box.replaceChildren(el("div", { class: "muted" }, "No slave is streaming from this master.")); return; }
  const tb = el("tbody");
  for (const x of slaves) tb.append(el("tr", null,
    el("td", null, x.remoteAddr), el("td", { class: "muted" }, fmtRelative(x.since)),
    el("td", { class: "num" }, fmtInt(x.position)), lagCell(x.lagEvents, max)));
  box.replaceChildren(el("table", null,
    el("thead", null, el("tr", null, el("th", null, "slave"), el("th", null, "since"), el("th", { class: "num" }, "sent eventId"), el("th", { class: "num" }, "lag"))), tb));
}

function renderQueues(qs) {
  const rows = qs.map((q) => el("tr", null,
    el("td", { class: "name", title: q.topic + " / " + q.config.group + "\n" + q.consumers.length + " consumer(s)\nack wait " +
      q.config.ackWaitMs + " ms" + (q.config.deadLetter ? "\ndead letters to " + q.config.deadLetter : "") },
      q.topic + " / " + q.config.group),
    el("td", { class: "num" }, fmtInt(q.pending)),
    el("td", { class: "num" }, fmtInt(q.inFlight)),
    el("td", { class: "num" }, fmtInt(q.redelivered)),
    el("td", { class: "num" }, fmtInt(q.deadLettered)),
    el("td", { class: "num" }, q.oldestPendingAgeMs ? (q.oldestPendingAgeMs / 1000).toFixed(1) + " s" : "–")));
  replaceRows($("queues").tBodies[0], rows, 6, "no queue groups");
  $("queues-note").textContent = qs.length ? "most pending first" : "";
}

function renderDelays(d) {
  setText("k-delay", fmtInt(d.pending));
  $("k-delay-next").textContent = d.nextDue ? "next " + fmtRelative(d.nextDue) : "none pending";
  $("delay-note").textContent = "by due time";
  const max = d.buckets.reduce((m, b) => Math.max(m, b.count), 0);
  const rows = d.buckets.map((b) => {
    const bar = el("b");
    bar.style.width = (max ? b.count / max * 100 : 0) + "%";
    return el("div", { class: "row" }, el("span", { class: "muted" }, b.withinMs < 0 ? "later" : "≤ " + b.label),
      el("span", { class: "track" }, bar), el("span", { class: "n" }, fmtInt(b.count)));
  });
  $("delays").replaceChildren(...rows);
}

const sorters = {
  name: (t) => t.name, status: (t) => t.status,
  messages: (t) => (t.stats ? t.stats.messages : -1), bytes: (t) => (t.stats ? t.stats.bytes : -1),
  in: (t) => rateOf(t).msgsPerSec, out: (t) => rateOf(t).deliveredMsgsPerSec,
  subscribers: (t) => t.subscribers, last: (t) => (t.stats ? t.stats.lastEventId : -1),
  expires: (t) => t.expireAt || Infinity,
};
function rateOf(t) { return state.rates.get(t.name) || { msgsPerSec: 0, deliveredMsgsPerSec: 0 }; }

function renderTopics() {
  const f = state.filter.toLowerCase();
  const list = state.topics.filter((t) => !f || t.name.toLowerCase().includes(f));
  const key = sorters[state.sort.key], dir = state.sort.desc ? -1 : 1;
  list.sort((a, b) => {
    const x = key(a), y = key(b);
    return (x < y ? -1 : x > y ? 1 : 0) * dir || (a.name < b.name ? -1 : 1);
  });
  const rows = list.map((t) => {
    const st = t.stats || {}, r = rateOf(t);
    const tip = t.name + "\ncreated " + fmtTime(t.createTimeStamp) + " (eventId " + t.createEventId + ")" +
      (st.files != null ? "\n" + st.files + " file(s), first eventId " + fmtInt(st.firstEventId) : "") +
      (t.topicRoot ? "\n" + t.topicRoot : "");
    return el("tr", { class: t.status },
      el("td", { class: "name", title: tip }, t.name),
      el("td", { class: "state" }, el("span", { class: "pill " + t.status }, t.status)),
      el("td", { class: "num" }, fmtInt(st.messages)),
      el("td", { class: "num" }, fmtBytes(st.bytes)),
      el("td", { class: "num" }, r.msgsPerSec ? fmtNum(r.msgsPerSec) : "·"),
      el("td", { class: "num" }, r.deliveredMsgsPerSec ? fmtNum(r.deliveredMsgsPerSec) : "·"),
      el("td", { class: "num" }, fmtInt(t.subscribers)),
      el("td", { class: "num" }, st.lastEventId ? fmtInt(st.lastEventId) : "–"),
      el("td", { class: "muted", title: t.expireAt ? fmtTime(t.expireAt) : "" }, t.expireAt ? fmtRelative(t.expireAt) : "never"));
  });
  replaceRows($("topics").tBodies[0], rows, 9, state.topics.length ? "no topic matches" : "no topics");
  const n = { normal: 0, expired: 0, deleted: 0 };
  let bytes = 0;
  for (const t of state.topics) { n[t.status] = (n[t.status] || 0) + 1; if (t.stats) bytes += t.stats.bytes; }
  $("topics-note").textContent = n.normal + " live" + (n.expired ? ", " + n.expired + " expired" : "") +
    (n.deleted ? ", " + n.deleted + " deleted" : "") + " · " + fmtBytes(bytes) + " on disk";
  $("k-topics").textContent = state.topics.length + " topics";
  for (const th of document.querySelectorAll("#topics th[data-sort]")) {
    th.classList.toggle("sorted", th.dataset.sort === state.sort.key);
    th.classList.toggle("asc", th.dataset.sort === state.sort.key && !state.sort.desc);
  }
}

// ---------- data flow ----------
function handle(err) {
  if (err instanceof Unauthorized) { showLogin(); return; }
  setLive("bad", "error");
  $("live").title = String(err.message || err);
}
async function loadInfo() { renderInfo(await api("/api/info")); }
async function loadTopics() { state.topics = await api("/api/topics"); renderTopics(); }
async function loadDelays() { renderDelays(await api("/api/delays")); }
async function loadQueues() { renderQueues(await api("/api/queues")); }

function openEvents() {
  if (state.es) state.es.close();
  const es = new EventSource("/api/events");
  state.es = es;
  es.addEventListener("open", () => setLive("ok", "live"));
  es.addEventListener("history", (e) => {
    const hist = JSON.parse(e.data);
    // keep points newer than the history (reconnect), drop duplicates
    const lastT = hist.length ? hist[hist.length - 1].time : 0;
    state.points = trim(hist.concat(state.points.filter((p) => p.time > lastT)));
    redrawCharts();
  });
  es.addEventListener("snapshot", (e) => {
    const s = JSON.parse(e.data);
    if (s.rates.seconds > 0 && (!state.points.length || state.points[state.points.length - 1].time < s.time)) {
      state.points.push({ time: s.time, rates: s.rates });
      state.points = trim(state.points);
      redrawCharts();
    }
    renderSnapshot(s);
    setLive("ok", "live");
  });
  es.addEventListener("error", () => {
    setLive("warn", "reconnecting");
    if (es.readyState === EventSource.CLOSED) {
      // the browser gave up (e.g. 401): find out why, retry later
      api("/api/info").then(() => setTimeout(openEvents, 2000)).catch(handle);
    }
  });
}

// trim keeps the points inside the chart window.
function trim(points) {
  if (!points.length) return points;
  const from = points[points.length - 1].time - WINDOW_MS;
  let i = 0;
  while (i < points.length && points[i].time < from) i++;
  return points.slice(Math.max(i, points.length - MAX_POINTS));
}
function every(ms, fn) { state.timers.push(setInterval(() => fn().catch(handle), ms)); }

async function start() {
  stop();
  try {
    await loadInfo();
  } catch (err) { handle(err); return; }
  $("login").hidden = true;
  loadTopics().catch(handle);
  loadDelays().catch(handle);
  loadQueues().catch(handle);
  openEvents();
  every(5000, loadTopics);
  every(10000, loadDelays);
  every(5000, loadQueues);
  every(30000, loadInfo);
  state.timers.push(setInterval(tickUptime, 1000));
}
function stop() {
  for (const t of state.timers) clearInterval(t);
  state.timers = [];
  if (state.es) { state.es.close(); state.es = null; }
}

function showLogin() {
  stop();
  setLive("bad", "signed out");
  $("login").hidden = false;
  $("login-token").focus();
}

function setupUI() {
  for (const th of document.querySelectorAll("#topics th[data-sort]")) {
    th.addEventListener("click", () => {
      const k = th.dataset.sort;
      state.sort = { key: k, desc: state.sort.key === k ? !state.sort.desc : k !== "name" };
      renderTopics();
    });
  }
  $("topic-filter").addEventListener("input", (e) => { state.filter = e.target.value; renderTopics(); });
  $("login-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    $("login-error").textContent = "";
    const r = await fetch("/api/login", {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ token: $("login-token").value }),
    });
    if (!r.ok) { $("login-error").textContent = r.status === 401 ? "Wrong token." : "Login failed (" + r.status + ")."; return; }
    $("login-token").value = "";
    start();
  });
  $("logout").addEventListener("click", async () => {
    await fetch("/api/logout", { method: "POST", credentials: "same-origin" });
    showLogin();
  });
}

setupCharts();
setupUI();
start();
