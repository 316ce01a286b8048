package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
)

// Params echoes the knobs of a run into its result.
type Params struct {
	Conns     int     `json:"conns"`
	Size      int     `json:"size"`
	Records   int     `json:"records"`
	Batch     int     `json:"batch,omitempty"`
	Rate      float64 `json:"rate,omitempty"`
	Flush     int     `json:"flush"`
	Durable   string  `json:"durability"` // smss flushLevel or Redis appendfsync
	WithSlave bool    `json:"with_slave,omitempty"`
	// SyncSlaves is the master's replication.syncSlaves (--sync-slaves).
	SyncSlaves int  `json:"sync_slaves,omitempty"`
	IDs        bool `json:"ids,omitempty"` // smss: a message id on every request
	// Copies says what an acknowledgement means when it stands for more
	// than one server's copy (replicated runs).
	Copies string `json:"copies,omitempty"`
	// Ack is the JetStream pull consumer's ack policy (sub, e2e).
	Ack string `json:"ack,omitempty"`
}

// RSS is the server's memory as /proc/PID/status reports it, in KiB.
type RSS struct {
	IdleKiB   int64 `json:"idle_kib"` // VmRSS before the timed phase
	MaxKiB    int64 `json:"max_kib"`  // highest VmRSS sampled during it (every 100 ms)
	EndKiB    int64 `json:"end_kib"`  // VmRSS right after it
	HWMKiB    int64 `json:"hwm_kib"`  // VmHWM at the end (peak since the process started), at least MaxKiB
	SlaveKiB  int64 `json:"slave_kib,omitempty"`
	SlaveHWM  int64 `json:"slave_hwm_kib,omitempty"`
	SampledAt int   `json:"samples"`
}

// CPU is the user+system time the server used during the timed phase
// (/proc/PID/stat, 10 ms resolution). On a machine the client shares, it
// says how much of the box each server needs per message.
type CPU struct {
	Seconds  float64 `json:"seconds"`
	Percent  float64 `json:"percent"` // of one core
	USPerMsg float64 `json:"us_per_msg,omitempty"`
	// SlavePercent is an attached slave's CPU over the same phase (pub
	// --with-slave): on a shared box it is taken from the master's clients.
	SlavePercent float64 `json:"slave_percent,omitempty"`
}

// Disk is the server's data directory footprint after the run: Bytes are
// allocated on disk (du), Parts are apparent sizes per top-level entry.
type Disk struct {
	Bytes       int64            `json:"bytes"`
	BytesPerMsg float64          `json:"bytes_per_msg"`
	Parts       map[string]int64 `json:"apparent_parts,omitempty"`
}

// Result is one run of one workload against one system.
type Result struct {
	System     string             `json:"system"`
	Workload   string             `json:"workload"`
	Params     Params             `json:"params"`
	Messages   int64              `json:"messages"`
	Requests   int64              `json:"requests"`
	LateSends  int64              `json:"late_sends,omitempty"` // rate mode: sends > 1 ms behind schedule
	Seconds    float64            `json:"seconds"`
	MsgsPerSec float64            `json:"msgs_per_sec"`
	MBPerSec   float64            `json:"mb_per_sec"` // message bodies, 10^6 bytes
	Latency    *Latency           `json:"latency,omitempty"`
	RSS        *RSS               `json:"rss,omitempty"`
	CPU        *CPU               `json:"server_cpu,omitempty"`
	ClientCPU  float64            `json:"client_cpu_percent,omitempty"` // the benchmark process, % of one core
	Disk       *Disk              `json:"disk,omitempty"`
	Extra      map[string]float64 `json:"extra,omitempty"`
	LoadAvg    [2][3]float64      `json:"loadavg"` // /proc/loadavg at start and end
}

// metric names a number of a Result that medians and comparisons use.
type metric struct {
	name   string
	higher bool // higher is better
	get    func(*Result) (float64, bool)
}

func latGet(f func(*Latency) float64) func(*Result) (float64, bool) {
	return func(r *Result) (float64, bool) {
		if r.Latency == nil {
			return 0, false
		}
		return f(r.Latency), true
	}
}

func rssGet(f func(*RSS) int64) func(*Result) (float64, bool) {
	return func(r *Result) (float64, bool) {
		if r.RSS == nil || f(r.RSS) == 0 {
			return 0, false
		}
		return float64(f(r.RSS)) / 1024, true
	}
}

var metrics = []metric{
	{"msgs/s", true, func(r *Result) (float64, bool) { return r.MsgsPerSec, r.MsgsPerSec > 0 }},
	{"MB/s", true, func(r *Result) (float64, bool) { return r.MBPerSec, r.MBPerSec > 0 }},
	{"lat mean µs", false, latGet(func(l *Latency) float64 { return l.Mean })},
	{"lat p50 µs", false, latGet(func(l *Latency) float64 { return l.P50 })},
	{"lat p99 µs", false, latGet(func(l *Latency) float64 { return l.P99 })},
	{"lat p999 µs", false, latGet(func(l *Latency) float64 { return l.P999 })},
	{"lat max µs", false, latGet(func(l *Latency) float64 { return l.Max })},
	{"server CPU %", false, func(r *Result) (float64, bool) {
		if r.CPU == nil {
			return 0, false
		}
		return r.CPU.Percent, true
	}},
	{"server CPU µs/msg", false, func(r *Result) (float64, bool) {
		if r.CPU == nil || r.CPU.USPerMsg == 0 {
			return 0, false
		}
		return r.CPU.USPerMsg, true
	}},
	{"slave CPU %", false, func(r *Result) (float64, bool) {
		if r.CPU == nil || r.CPU.SlavePercent == 0 {
			return 0, false
		}
		return r.CPU.SlavePercent, true
	}},
	{"client CPU %", false, func(r *Result) (float64, bool) { return r.ClientCPU, r.ClientCPU > 0 }},
	{"RSS idle MiB", false, rssGet(func(r *RSS) int64 { return r.IdleKiB })},
	{"RSS max MiB", false, rssGet(func(r *RSS) int64 { return r.MaxKiB })},
	{"RSS HWM MiB", false, rssGet(func(r *RSS) int64 { return r.HWMKiB })},
	{"slave RSS MiB", false, rssGet(func(r *RSS) int64 { return r.SlaveKiB })},
	{"disk B/msg", false, func(r *Result) (float64, bool) {
		if r.Disk == nil {
			return 0, false
		}
		return r.Disk.BytesPerMsg, true
	}},
}

// extraKeys lists the Extra keys present in any of rs, sorted.
func extraKeys(rs []*Result) []string {
	seen := map[string]bool{}
	for _, r := range rs {
		for k := range r.Extra {
			seen[k] = true
		}
	}
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}

// row is one printable line: a metric and its value (median over runs).
type row struct {
	name   string
	higher bool
	val    float64
	ok     bool
}

// medianRows returns every metric present in rs with its median over rs.
func medianRows(rs []*Result) []row {
	var out []row
	for _, m := range metrics {
		var vals []float64
		for _, r := range rs {
			if v, ok := m.get(r); ok {
				vals = append(vals, v)
			}
		}
		out = append(out, row{name: m.name, higher: m.higher, val: median(vals), ok: len(vals) > 0})
	}
	for _, k := range extraKeys(rs) {
		var vals []float64
		for _, r := range rs {
			if v, ok := r.Extra[k]; ok {
				vals = append(vals, v)
			}
		}
		out = append(out, row{name: k, val: median(vals), ok: len(vals) > 0})
	}
	return out
}

func fmtNum(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 999.95: // would print as 1000.0
		return groupThousands(strconv.FormatFloat(v, 'f', 0, 64))
	case v >= 99.995:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

func groupThousands(s string) string {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func describe(r *Result) string {
	p := r.Params
	s := fmt.Sprintf("%s %s: conns=%d size=%d records=%d", r.System, r.Workload, p.Conns, p.Size, p.Records)
	if p.Batch > 0 {
		s += fmt.Sprintf(" batch=%d", p.Batch)
	}
	if p.Ack != "" {
		s += " ack=" + p.Ack
	}
	if p.Rate > 0 {
		s += fmt.Sprintf(" rate=%g/s", p.Rate)
	}
	s += " durability=" + p.Durable
	if p.WithSlave {
		s += " with-slave"
	}
	if p.SyncSlaves > 0 {
		s += fmt.Sprintf(" sync-slaves=%d", p.SyncSlaves)
	}
	if p.IDs {
		s += " ids"
	}
	if p.Copies != "" {
		s += "\n  " + p.Copies
	}
	return s
}

// printRuns prints the runs of one system and the medians of its metrics.
func printRuns(w io.Writer, rs []*Result) {
	if len(rs) == 0 {
		return
	}
	fmt.Fprintln(w, describe(rs[0]))
	for i, r := range rs {
		fmt.Fprintf(w, "  run %d: %s msgs in %.2fs, %s msgs/s, %s MB/s", i+1, groupThousands(strconv.FormatInt(r.Messages, 10)),
			r.Seconds, fmtNum(r.MsgsPerSec), fmtNum(r.MBPerSec))
		if r.Latency != nil {
			fmt.Fprintf(w, ", %s p50/p99/p999/max %s/%s/%s/%s µs", r.Latency.Unit,
				fmtNum(r.Latency.P50), fmtNum(r.Latency.P99), fmtNum(r.Latency.P999), fmtNum(r.Latency.Max))
		}
		fmt.Fprintf(w, ", load %.2f\n", r.LoadAvg[0][0])
	}
	label := "median"
	if len(rs) == 1 {
		label = "result"
	}
	fmt.Fprintf(w, "  %s:\n", label)
	for _, rw := range medianRows(rs) {
		if rw.ok {
			fmt.Fprintf(w, "    %-22s %14s\n", rw.name, fmtNum(rw.val))
		}
	}
	if d := rs[len(rs)-1].Disk; d != nil {
		fmt.Fprintf(w, "  disk (last run): %s bytes allocated; apparent sizes:%s\n", groupThousands(strconv.FormatInt(d.Bytes, 10)), fmtParts(d.Parts))
	}
}

func fmtParts(parts map[string]int64) string {
	keys := make([]string, 0, len(parts))
	for k := range parts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%s", k, groupThousands(strconv.FormatInt(parts[k], 10)))
	}
	return b.String()
}

// printCompare prints smss and the peer's (Redis or JetStream) medians
// side by side. ratio is smss/peer; for throughput higher is better, for
// latency, RSS and disk lower is better.
func printCompare(w io.Writer, peer string, smss, redis []*Result) {
	if len(smss) > 0 {
		fmt.Fprintln(w, describe(smss[0]))
	}
	if len(redis) > 0 {
		fmt.Fprintln(w, describe(redis[0]))
	}
	fmt.Fprintf(w, "runs: %d each (median shown); ratio = smss/%s\n", len(smss), peer)
	fmt.Fprintf(w, "%-22s %14s %14s %9s\n", "metric", "smss", peer, "ratio")
	a, b := medianRows(smss), medianRows(redis)
	bm := map[string]row{}
	for _, r := range b {
		bm[r.name] = r
	}
	for _, r := range a {
		o := bm[r.name]
		if !r.ok && !o.ok {
			continue
		}
		sv, rv, ratio := "-", "-", "-"
		if r.ok {
			sv = fmtNum(r.val)
		}
		if o.ok {
			rv = fmtNum(o.val)
		}
		if r.ok && o.ok && o.val != 0 {
			ratio = fmt.Sprintf("%.2fx", r.val/o.val)
		}
		fmt.Fprintf(w, "%-22s %14s %14s %9s\n", r.name, sv, rv, ratio)
	}
	for _, side := range [][]*Result{smss, redis} {
		if len(side) > 0 && side[len(side)-1].Disk != nil {
			fmt.Fprintf(w, "%s disk (last run): apparent sizes:%s\n", side[0].System, fmtParts(side[len(side)-1].Disk.Parts))
		}
	}
}

// compareJSON is the --json output of compare.
type compareJSON struct {
	Smss       []*Result          `json:"smss"`
	Redis      []*Result          `json:"redis,omitempty"`
	SmssMedian map[string]float64 `json:"smss_median"`
	RedisMed   map[string]float64 `json:"redis_median,omitempty"`
	Ratio      map[string]float64 `json:"ratio_smss_over_redis,omitempty"`
	// --peer jetstream
	JetStream      []*Result          `json:"jetstream,omitempty"`
	JetStreamMed   map[string]float64 `json:"jetstream_median,omitempty"`
	RatioJetStream map[string]float64 `json:"ratio_smss_over_jetstream,omitempty"`
}

func rowsMap(rows []row) map[string]float64 {
	m := map[string]float64{}
	for _, r := range rows {
		if r.ok {
			m[r.name] = r.val
		}
	}
	return m
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// loadAvg reads the 1, 5 and 15 minute load averages.
func loadAvg() [3]float64 {
	var l [3]float64
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return l
	}
	f := strings.Fields(string(b))
	for i := 0; i < 3 && i < len(f); i++ {
		l[i], _ = strconv.ParseFloat(f[i], 64)
	}
	return l
}
