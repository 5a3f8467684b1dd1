package metrics

import "github.com/prometheus/client_golang/prometheus"

// The worker channels' series (docs/worker-protocol.md, The worker
// channel). Frame types are the protocol's fixed set.
type channelSeries struct {
	open   prometheus.Gauge
	opened prometheus.Counter
	offers prometheus.Counter
	frames *prometheus.CounterVec // direction, type
}

func newChannelSeries(f factory) channelSeries {
	open := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "worker_channels",
		Help: "Worker channels open on this instance."})
	f.reg.MustRegister(open)
	return channelSeries{
		open:   open,
		opened: f.counter("worker_channels_opened_total", "Worker channels opened."),
		offers: f.counter("worker_channel_offered_jobs_total", "Jobs nqd claimed for workers and offered over their channels."),
		frames: f.counterVec("worker_channel_frames_total",
			"Worker channel frames by direction (in from workers, out to them) and type.", "direction", "type"),
	}
}

// Channels is what to set as handlers.Deps.Channels.
func (m *Metrics) Channels() ChannelObserver { return ChannelObserver{m.channels} }

// ChannelObserver counts what the worker channels do.
type ChannelObserver struct{ s channelSeries }

func (o ChannelObserver) ChannelOpened() { o.s.open.Inc(); o.s.opened.Inc() }
func (o ChannelObserver) ChannelClosed() { o.s.open.Dec() }
func (o ChannelObserver) Offered(n int)  { o.s.offers.Add(float64(n)) }
func (o ChannelObserver) Frame(direction, typ string) {
	o.s.frames.WithLabelValues(direction, typ).Inc()
}
