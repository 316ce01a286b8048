package metrics

import (
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/smssmq/smss/protocol"
)

// Reading is a point-in-time copy of the cumulative counters, taken by Read.
// Two Readings give the rates and latency quantiles of the time between
// them (Between), which is what the dashboard and smssctl top show.
type Reading struct {
	At                           time.Time
	Publishes, PubMsgs, PubBytes int64
	DelivMsgs, DelivBytes        int64
	Connections                  int64
	requests, pub                histReading
}

// histReading holds a histogram's per-bucket (not cumulative) counts over
// LatencyBuckets, the last entry being the +Inf bucket.
type histReading struct {
	counts []uint64
	n      uint64
}

// Read takes a Reading. It costs a few microseconds (it copies the
// per-command histograms) and is meant to run about once a second.
func (m *Metrics) Read() Reading {
	r := Reading{At: time.Now()}
	if m == nil {
		return r
	}
	r.Publishes, r.PubMsgs, r.PubBytes = m.pubs.Load(), m.pubMsgs.Load(), m.pubBytes.Load()
	r.DelivMsgs, r.DelivBytes = m.delMsgs.Load(), m.delBytes.Load()
	r.Connections = m.connsOpen.Load()
	r.requests.counts = make([]uint64, len(LatencyBuckets)+1)
	var pb dto.Metric
	for cmd, h := range m.reqHist {
		// Stream commands last as long as the stream when callers time
		// the whole request, and say nothing about request latency.
		if cmd == protocol.CmdSub || cmd == protocol.CmdReplica {
			continue
		}
		pb.Reset()
		if err := h.Write(&pb); err != nil || pb.GetHistogram() == nil {
			continue
		}
		hr := toReading(pb.GetHistogram())
		r.requests.add(hr)
		if cmd == protocol.CmdPub {
			r.pub = hr
		}
	}
	return r
}

func toReading(h *dto.Histogram) histReading {
	hr := histReading{counts: make([]uint64, len(LatencyBuckets)+1), n: h.GetSampleCount()}
	var prev uint64
	for i, b := range h.GetBucket() {
		if i >= len(LatencyBuckets) {
			break
		}
		c := b.GetCumulativeCount()
		hr.counts[i] = c - prev
		prev = c
	}
	if hr.n >= prev {
		hr.counts[len(LatencyBuckets)] = hr.n - prev
	}
	return hr
}

func (h *histReading) add(o histReading) {
	h.n += o.n
	for i := range o.counts {
		h.counts[i] += o.counts[i]
	}
}

// sub returns h − o bucket by bucket (o earlier than h).
func (h histReading) sub(o histReading) histReading {
	d := histReading{counts: make([]uint64, len(LatencyBuckets)+1)}
	for i := range d.counts {
		var a, b uint64
		if i < len(h.counts) {
			a = h.counts[i]
		}
		if i < len(o.counts) {
			b = o.counts[i]
		}
		if a > b {
			d.counts[i] = a - b
			d.n += a - b
		}
	}
	return d
}

// quantile estimates the q-quantile in seconds by linear interpolation
// inside the bucket holding it (as PromQL's histogram_quantile does);
// -1 when there are no observations. An estimate in the +Inf bucket is the
// highest finite bound.
func (h histReading) quantile(q float64) float64 {
	if h.n == 0 {
		return -1
	}
	rank := q * float64(h.n)
	var cum float64
	for i, c := range h.counts {
		if c == 0 {
			continue
		}
		if cum+float64(c) >= rank {
			if i >= len(LatencyBuckets) {
				return LatencyBuckets[len(LatencyBuckets)-1]
			}
			lo := 0.0
			if i > 0 {
				lo = LatencyBuckets[i-1]
			}
			hi := LatencyBuckets[i]
			return lo + (hi-lo)*(rank-cum)/float64(c)
		}
		cum += float64(c)
	}
	return LatencyBuckets[len(LatencyBuckets)-1]
}

// Rates are the activity between two Readings. Latencies are in
// milliseconds, -1 when no request completed in the interval.
type Rates struct {
	Seconds              float64 `json:"seconds"`
	PublishesPerSec      float64 `json:"publishesPerSec"`
	MsgsPerSec           float64 `json:"msgsPerSec"`
	BytesPerSec          float64 `json:"bytesPerSec"`
	DeliveredMsgsPerSec  float64 `json:"deliveredMsgsPerSec"`
	DeliveredBytesPerSec float64 `json:"deliveredBytesPerSec"`
	RequestsPerSec       float64 `json:"requestsPerSec"`
	P50Ms                float64 `json:"p50Ms"`
	P99Ms                float64 `json:"p99Ms"`
	PubP50Ms             float64 `json:"pubP50Ms"`
	PubP99Ms             float64 `json:"pubP99Ms"`
	Connections          int64   `json:"connections"`
}

// Between returns the rates from prev to cur (cur taken after prev).
func Between(prev, cur Reading) Rates {
	r := Rates{Connections: cur.Connections, P50Ms: -1, P99Ms: -1, PubP50Ms: -1, PubP99Ms: -1}
	secs := cur.At.Sub(prev.At).Seconds()
	if secs <= 0 {
		return r
	}
	r.Seconds = secs
	rate := func(a, b int64) float64 {
		if b < a {
			return 0
		}
		return float64(b-a) / secs
	}
	r.PublishesPerSec = rate(prev.Publishes, cur.Publishes)
	r.MsgsPerSec = rate(prev.PubMsgs, cur.PubMsgs)
	r.BytesPerSec = rate(prev.PubBytes, cur.PubBytes)
	r.DeliveredMsgsPerSec = rate(prev.DelivMsgs, cur.DelivMsgs)
	r.DeliveredBytesPerSec = rate(prev.DelivBytes, cur.DelivBytes)
	reqs := cur.requests.sub(prev.requests)
	r.RequestsPerSec = float64(reqs.n) / secs
	r.P50Ms, r.P99Ms = ms(reqs.quantile(.5)), ms(reqs.quantile(.99))
	pub := cur.pub.sub(prev.pub)
	r.PubP50Ms, r.PubP99Ms = ms(pub.quantile(.5)), ms(pub.quantile(.99))
	return r
}

func ms(sec float64) float64 {
	if sec < 0 {
		return -1
	}
	return sec * 1000
}
