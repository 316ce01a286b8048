package adminclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/smssmq/smss/admin/adminapi"
	"github.com/smssmq/smss/metrics"
)

// Stats is everything RunStats prints, as its JSON output has it.
type Stats struct {
	Info        adminapi.Info            `json:"info"`
	Snapshot    *adminapi.Snapshot       `json:"snapshot,omitempty"`
	Topics      []adminapi.TopicView     `json:"topics"`
	Subscribers []metrics.SubscriberInfo `json:"subscribers"`
	Replication metrics.ReplicationInfo  `json:"replication"`
	Delays      metrics.DelayStats       `json:"delays"`
}

// FetchStats reads every JSON endpoint once.
func (c *Client) FetchStats(ctx context.Context) (*Stats, error) {
	var st Stats
	for _, q := range []struct {
		path string
		v    any
	}{
		{"/api/info", &st.Info},
		{"/api/topics", &st.Topics},
		{"/api/subscribers", &st.Subscribers},
		{"/api/replication", &st.Replication},
		{"/api/delays", &st.Delays},
	} {
		if err := c.Get(ctx, q.path, q.v); err != nil {
			return nil, err
		}
	}
	// Rates exist only once the sampler has run; stats works without them.
	var snap adminapi.Snapshot
	if err := c.Get(ctx, "/api/snapshot", &snap); err == nil {
		st.Snapshot = &snap
	} else if errors.Is(err, ErrUnauthorized) || ctx.Err() != nil {
		return nil, err
	}
	return &st, nil
}

// RunStats prints one report of the server at baseURL to w: server info,
// current rates, topics, subscribers, replication and delayed messages; with
// asJSON the Stats object instead. smssctl wires it as `smssctl stats`.
func RunStats(ctx context.Context, w io.Writer, baseURL, token string, asJSON bool) error {
	c, err := NewClient(baseURL, token)
	if err != nil {
		return err
	}
	st, err := c.FetchStats(ctx)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	var b bytes.Buffer
	renderStats(&b, st, time.Now())
	_, err = w.Write(b.Bytes())
	return err
}

func renderStats(b *bytes.Buffer, st *Stats, now time.Time) {
	renderHeader(b, st.Info, st.Snapshot)
	b.WriteByte('\n')
	renderTopicTable(b, st.Topics, nil, 0, now)
	b.WriteByte('\n')
	renderSubscriberTable(b, st.Subscribers, len(st.Subscribers), 0)
	b.WriteByte('\n')
	renderReplication(b, st.Replication, now)
	b.WriteByte('\n')
	renderDelays(b, st.Delays, now)
}

func renderHeader(b *bytes.Buffer, in adminapi.Info, snap *adminapi.Snapshot) {
	ready := "ready"
	if !in.Ready {
		ready = "NOT READY: " + in.ReadyReason
	}
	lastID := in.LastEventID
	if snap != nil && snap.LastEventID > lastID {
		lastID = snap.LastEventID
	}
	fmt.Fprintf(b, "smss %s %s  listen %s  up %s  last eventId %d  %s\n",
		orDash(in.Role), orDash(in.Version), orDash(in.ListenAddr),
		humanDur(time.Duration(in.UptimeSeconds*float64(time.Second))), lastID, clip(ready, 80))
	if in.BinlogBytes > 0 || in.BinlogFiles > 0 {
		fmt.Fprintf(b, "binlog %s in %d files  data %s\n", humanBytes(float64(in.BinlogBytes)), in.BinlogFiles, orDash(in.DataDir))
	}
	if snap == nil {
		return
	}
	r := snap.Rates
	fmt.Fprintf(b, "in  %s msg/s  %s/s  (%s pub/s)    out %s msg/s  %s/s\n",
		humanCount(r.MsgsPerSec), humanBytes(r.BytesPerSec), humanCount(r.PublishesPerSec),
		humanCount(r.DeliveredMsgsPerSec), humanBytes(r.DeliveredBytesPerSec))
	fmt.Fprintf(b, "latency p50 %s  p99 %s  (pub p50 %s  p99 %s)  %s req/s  %d connections  %d subscribers (max lag %d)\n",
		humanMs(r.P50Ms), humanMs(r.P99Ms), humanMs(r.PubP50Ms), humanMs(r.PubP99Ms),
		humanCount(r.RequestsPerSec), r.Connections, snap.SubscriberCount, snap.MaxLag)
}

// renderTopicTable prints topics; with rates (top) it adds in/out columns
// and sorts the busiest first, else it sorts by name. limit 0 = all.
func renderTopicTable(b *bytes.Buffer, topics []adminapi.TopicView, rates map[string]adminapi.TopicRate, limit int, now time.Time) {
	counts := map[string]int{}
	var disk int64
	for _, t := range topics {
		counts[t.Status]++
		if t.Stats != nil {
			disk += t.Stats.Bytes
		}
	}
	fmt.Fprintf(b, "TOPICS  %d live, %d expired, %d deleted; %s on disk\n",
		counts[metrics.TopicStateNormal], counts[metrics.TopicStateExpired], counts[metrics.TopicStateDeleted], humanBytes(float64(disk)))
	if len(topics) == 0 {
		return
	}
	list := append([]adminapi.TopicView(nil), topics...)
	if rates != nil {
		sort.SliceStable(list, func(i, j int) bool {
			ri, rj := rates[list[i].Name], rates[list[j].Name]
			if a, c := ri.MsgsPerSec+ri.DeliveredMsgsPerSec, rj.MsgsPerSec+rj.DeliveredMsgsPerSec; a != c {
				return a > c
			}
			return statBytes(list[i]) > statBytes(list[j])
		})
	}
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	if rates != nil {
		fmt.Fprint(tw, "TOPIC\tSTATE\tMESSAGES\tSIZE\tIN/S\tOUT/S\tSUBS\tLAST ID\tEXPIRES\n")
	} else {
		fmt.Fprint(tw, "TOPIC\tSTATE\tMESSAGES\tSIZE\tFIRST ID\tLAST ID\tSUBS\tCREATED\tEXPIRES\n")
	}
	for i, t := range list {
		if limit > 0 && i == limit {
			fmt.Fprintf(tw, "… %d more\n", len(list)-limit)
			break
		}
		msgs, size, first, last := "-", "-", "-", "-"
		if s := t.Stats; s != nil {
			msgs, size, first, last = humanInt(s.Messages), humanBytes(float64(s.Bytes)), eventID(s.FirstEventID), eventID(s.LastEventID)
		}
		expires := "never"
		if t.ExpireAt > 0 {
			expires = relative(t.ExpireAt, now)
		}
		if rates != nil {
			r := rates[t.Name]
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", clip(t.Name, 40), t.Status, msgs, size,
				humanCount(r.MsgsPerSec), humanCount(r.DeliveredMsgsPerSec), t.Subscribers, last, expires)
		} else {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", clip(t.Name, 40), t.Status, msgs, size,
				first, last, t.Subscribers, humanTime(t.CreateTime), expires)
		}
	}
	_ = tw.Flush()
}

func statBytes(t adminapi.TopicView) int64 {
	if t.Stats == nil {
		return -1
	}
	return t.Stats.Bytes
}

func renderSubscriberTable(b *bytes.Buffer, subs []metrics.SubscriberInfo, total, limit int) {
	fmt.Fprintf(b, "SUBSCRIBERS  %d\n", total)
	if len(subs) == 0 {
		return
	}
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "TOPIC\tWHO\tREMOTE\tPOSITION\tLAG\n")
	for i, s := range subs {
		if limit > 0 && i == limit {
			fmt.Fprintf(tw, "… %d more\n", total-limit)
			break
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\n", clip(s.Topic, 30), clip(s.Who, 24), orDash(s.RemoteAddr), s.Position, s.Lag)
	}
	_ = tw.Flush()
}

func renderReplication(b *bytes.Buffer, r metrics.ReplicationInfo, now time.Time) {
	if r.Role == metrics.RoleSlave {
		m := r.Master
		if m == nil {
			b.WriteString("REPLICATION  slave, no link information\n")
			return
		}
		lag := fmt.Sprintf("%.1fs", m.LagSeconds)
		if m.LagEvents >= 0 {
			lag = fmt.Sprintf("%d events, %s", m.LagEvents, lag)
		}
		fmt.Fprintf(b, "REPLICATION  slave of %s  %s  applied %d  lag %s  last contact %s\n",
			orDash(m.Addr), strings.ToUpper(orDash(m.State)), m.Position, lag, relative(m.LastContact, now))
		if m.LastError != "" {
			fmt.Fprintf(b, "  last error: %s\n", clip(m.LastError, 200))
		}
		return
	}
	fmt.Fprintf(b, "REPLICATION  master, %d slave(s)\n", len(r.Slaves))
	if y := r.Sync; y != nil && y.SyncSlaves > 0 {
		state := "synchronous"
		if y.Degraded {
			state = "DEGRADED (asynchronous) since " + relative(y.DegradedSince, now)
		}
		fmt.Fprintf(b, "  semi-sync: %d slave(s) within %d ms (%s), %s; %d confirming, confirmed up to %d, %d writes waiting, timeouts %d fail / %d degrade\n",
			y.SyncSlaves, y.TimeoutMs, y.OnTimeout, state, y.Confirming, y.Confirmed, y.Waiting, y.TimeoutsFail, y.TimeoutsDegrade)
	}
	if len(r.Slaves) == 0 {
		return
	}
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "SLAVE\tSINCE\tSENT ID\tLAG\tCONFIRMED\n")
	for _, s := range r.Slaves {
		conf := "-" // an original slave, or none yet
		if s.Confirming {
			conf = fmt.Sprintf("%d (%.1f ms)", s.Confirmed, s.ConfirmLatencySeconds*1e3)
			if s.Fsynced {
				conf += " fsynced"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", s.RemoteAddr, relative(s.Since, now), s.Position, s.LagEvents, conf)
	}
	_ = tw.Flush()
}

func renderDelays(b *bytes.Buffer, d metrics.DelayStats, now time.Time) {
	next := "none pending"
	if d.NextDue > 0 {
		next = "next due " + relative(d.NextDue, now)
	}
	fmt.Fprintf(b, "DELAYED  %d pending, %s\n", d.Pending, next)
	if d.Pending == 0 {
		return
	}
	var parts []string
	for _, bk := range d.Buckets {
		label := "<=" + bk.Label
		if bk.WithinMs < 0 {
			label = bk.Label
		}
		parts = append(parts, fmt.Sprintf("%s %d", label, bk.Count))
	}
	fmt.Fprintf(b, "  %s\n", strings.Join(parts, "  "))
}

// eventID prints an absent id (0, or -1 for unknown) as "-".
func eventID(v int64) string {
	if v <= 0 {
		return "-"
	}
	return humanInt(v)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return clip(s, 60)
}

// clearScreen moves the cursor home and clears the terminal.
const clearScreen = "\x1b[H\x1b[2J"

// RunTop redraws a live view of the server at baseURL on w every interval
// (default 2s) until ctx ends, then returns nil. Rates are those of the
// server's last sample interval (1 s). Errors before the first frame are
// returned; later ones are shown in the frame and retried. smssctl wires it
// as `smssctl top`.
func RunTop(ctx context.Context, w io.Writer, baseURL, token string, interval time.Duration) error {
	if interval <= 0 {
		interval = 2 * time.Second
	}
	c, err := NewClient(baseURL, token)
	if err != nil {
		return err
	}
	var last *Stats
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		st, err := c.FetchStats(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil && (last == nil || errors.Is(err, ErrUnauthorized)) {
			return err
		}
		var b bytes.Buffer
		b.WriteString(clearScreen)
		if err != nil {
			renderTop(&b, last, time.Now())
			fmt.Fprintf(&b, "\n! %s (retrying every %s)\n", clip(err.Error(), 200), interval)
		} else {
			last = st
			renderTop(&b, st, time.Now())
		}
		if _, err := w.Write(b.Bytes()); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

func renderTop(b *bytes.Buffer, st *Stats, now time.Time) {
	renderHeader(b, st.Info, st.Snapshot)
	fmt.Fprintf(b, "%s\n\n", now.Format("15:04:05"))
	rates := map[string]adminapi.TopicRate{}
	if st.Snapshot != nil {
		for _, r := range st.Snapshot.Topics {
			rates[r.Name] = r
		}
	}
	renderTopicTable(b, st.Topics, rates, 15, now)
	b.WriteByte('\n')
	renderSubscriberTable(b, st.Subscribers, len(st.Subscribers), 10)
	b.WriteByte('\n')
	renderReplication(b, st.Replication, now)
	renderDelays(b, st.Delays, now)
}
