package daemon

import (
	"context"
	"errors"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/replication"
)

// metrics are the daemon's Prometheus series. Each has a fixed, small label
// set: no cell names in labels, so cardinality stays flat with 100,000 cells.
type metrics struct {
	reg *prometheus.Registry

	cellsHeld     prometheus.Gauge
	cellsReleased *prometheus.CounterVec // reason: idle, max_cells
	claims        *prometheus.CounterVec // result, reason
	releases      *prometheus.CounterVec // result
	takeovers     *prometheus.CounterVec // reason: owner-dead, forced
	appends       *prometheus.CounterVec // result
	txnRecords    prometheus.Histogram
	txnPuts       prometheus.Histogram
	s3Requests    *prometheus.CounterVec // op, outcome
	s3Latency     *prometheus.HistogramVec
	renewals      *prometheus.CounterVec // result
	fences        *prometheus.CounterVec // reason
	nodeLeaseHeld prometheus.Gauge
	forwards      *prometheus.CounterVec // result
	// forwardsUnable counts the forwards of requests this node could not
	// serve itself, by why (fenced, draining).
	forwardsUnable *prometheus.CounterVec
	moves          *prometheus.CounterVec // direction: out, in
	movePushes     *prometheus.CounterVec // result: ok, error
	trimDeleted    prometheus.Counter     // files deleted below trim points
	releaseHints   *prometheus.CounterVec // result: ok, error, dropped
}

// Label values each series is created with at zero, so that a dashboard or
// an alert sees "0 so far" rather than no series until the first event.
// They are all the values the code emits; the metrics table of docs/operations.md lists
// the same, and a test checks the three agree.
var (
	claimLabels = [][2]string{ // result, reason
		{"ok", "absent"}, {"ok", "released"}, {"ok", "re-entry"}, {"ok", "owner-dead"}, {"ok", "forced"},
		{"held", "owner-alive"}, {"corrupt", "corrupt"}, {"error", "none"},
	}
	releaseResults  = []string{"ok", "error", "not_holder"}
	cellReleased    = []string{releasedIdle, releasedMaxCells}
	takeoverReasons = []string{"owner-dead", "forced"}
	appendResults   = []string{"ok", "fenced", "held", "error", "unknown"}
	s3Ops           = []string{"get", "head", "put", "delete", "list"}
	s3Outcomes      = []string{"ok", "not_found", "precondition", "conflict", "ambiguous", "unavailable", "denied", "unsupported"}
	renewalResults  = []string{"ok", "error", "replaced", "deleted"}
	fenceReasons    = []string{"unreachable", "expired", "replaced", "deleted"}
	forwardResults  = []string{"ok", "unreachable", "rerouted", "lost", "refused", "unverified"}
	unableReasons   = []string{"fenced", "draining"}
	moveDirections  = []string{"out", "in"}
	pushResults     = []string{"ok", "error"}
	hintResults     = []string{hintPushOK, hintPushError, hintPushDropped}
)

// newMetrics makes the series; version is deed_build_info's label.
func newMetrics(version string) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.cellsHeld = prometheus.NewGauge(prometheus.GaugeOpts{Name: "deed_cells_held", Help: "Cells this node holds a live lease on."})
	m.cellsReleased = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "deed_cells_released_total", Help: "Cells this node retired on its own, by reason (idle: no request for --idle-release; max_cells: least recently used above --max-cells)."}, []string{"reason"})
	m.claims = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "deed_claims_total", Help: "Claim attempts by result (ok, held, corrupt, error) and reason (absent, released, re-entry, owner-dead, forced, owner-alive, corrupt; none when the claim failed before deciding)."}, []string{"result", "reason"})
	m.releases = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "deed_releases_total", Help: "Cell releases through the API by result (ok, error, not_holder)."}, []string{"result"})
	m.takeovers = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "deed_takeovers_total", Help: "Successful claims that took a cell from another node, by reason (owner-dead, forced)."}, []string{"reason"})
	m.appends = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "deed_appends_total", Help: "Appends by result (ok; fenced, held, error: not written; unknown: DEED-E012, may have been written)."}, []string{"result"})
	m.txnRecords = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "deed_txn_records", Help: "Records per durable transaction file (group commit batch size).", Buckets: prometheus.ExponentialBuckets(1, 2, 12)})
	m.txnPuts = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "deed_txn_puts", Help: "PUT attempts per durable transaction file (1 unless a PUT failed or was ambiguous and was sent again).", Buckets: []float64{1, 2, 3, 5, 8}})
	m.s3Requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "deed_s3_requests_total", Help: "Store requests by operation and outcome (ok, not_found, precondition, conflict, ambiguous, unavailable, denied, unsupported)."}, []string{"op", "outcome"})
	m.s3Latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "deed_s3_request_duration_seconds", Help: "Store request latency by operation.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}, []string{"op"})
	m.renewals = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "deed_node_renewals_total", Help: "Node-lease renewal attempts by result (ok, error, replaced, deleted)."}, []string{"result"})
	m.fences = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "deed_node_fences_total", Help: "Times this node fenced itself, by reason (unreachable, expired, replaced, deleted)."}, []string{"reason"})
	m.nodeLeaseHeld = prometheus.NewGauge(prometheus.GaugeOpts{Name: "deed_node_lease_held", Help: "1 while this node holds its node lease."})
	m.moves = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "deed_cells_moved_total", Help: "Cells moved between nodes, by direction (out: handed off by this node; in: claimed here on a peer's handoff)."}, []string{"direction"})
	m.movePushes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "deed_move_pushes_total", Help: "Handoff pushes to the target node after a move's release, by result (ok; error: the cell was left free, claimed by the next request)."}, []string{"result"})
	m.releaseHints = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "deed_release_hints_total", Help: "Release hints pushed to the node a released cell's next request is routed to, by result (ok: noted there; error: not delivered or refused; dropped: too many in flight, not sent)."}, []string{"result"})
	m.forwards = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "deed_forwarded_total", Help: "Requests forwarded to the peer that holds (or is placed to hold) the cell, by result (ok: its answer relayed; unreachable: not sent; rerouted: its dial failed, so routed once more without it; lost: sent, no answer; refused: the peer refused the peer proof; unverified: the answer had no valid peer proof and was not relayed)."}, []string{"result"})
	m.forwardsUnable = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "deed_forwarded_unable_total", Help: "Requests for a cell this node does not hold that it forwarded to a live peer rather than refuse, because it could not serve them itself, by reason (fenced: regaining its node lease; draining). Each is also counted in deed_forwarded_total."}, []string{"reason"})
	m.trimDeleted = prometheus.NewCounter(prometheus.CounterOpts{Name: "deed_trim_deleted_total", Help: "Record files this node deleted in the background below its cells' trim points (covered by a snapshot, in a sealed epoch)."})
	logInternal := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "deed_log_internal_errors_total", Help: "Cell logs this process ended because of an impossible state transition (a bug in deed: each ended only its own cell's log)."},
		func() float64 { return float64(replication.InternalErrors()) })
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{Name: "deed_build_info", Help: "Always 1; the labels say which build runs.",
		ConstLabels: prometheus.Labels{"version": version, "goversion": runtime.Version()}})
	buildInfo.Set(1)
	m.reg.MustRegister(m.cellsHeld, m.cellsReleased, m.claims, m.releases, m.takeovers, m.appends, m.txnRecords, m.txnPuts,
		m.s3Requests, m.s3Latency, m.renewals, m.fences, m.nodeLeaseHeld, m.forwards, m.forwardsUnable, m.moves, m.movePushes, m.trimDeleted, m.releaseHints, logInternal, buildInfo,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	for _, l := range claimLabels {
		m.claims.WithLabelValues(l[0], l[1])
	}
	for _, vs := range []struct {
		vec    *prometheus.CounterVec
		values []string
	}{{m.cellsReleased, cellReleased}, {m.releases, releaseResults}, {m.takeovers, takeoverReasons}, {m.appends, appendResults}, {m.renewals, renewalResults}, {m.fences, fenceReasons}, {m.forwards, forwardResults}, {m.forwardsUnable, unableReasons}, {m.moves, moveDirections}, {m.movePushes, pushResults}, {m.releaseHints, hintResults}} {
		for _, v := range vs.values {
			vs.vec.WithLabelValues(v)
		}
	}
	for _, op := range s3Ops {
		m.s3Latency.WithLabelValues(op)
		for _, o := range s3Outcomes {
			m.s3Requests.WithLabelValues(op, o)
		}
	}
	return m
}

// observeClaim counts one claim attempt and, for one that took a cell from
// another node, a takeover. A claim that failed before deciding has no
// reason; it is counted as "none" (an empty label value would read as a
// missing label).
func (m *metrics) observeClaim(result, reason string) {
	if reason == "" {
		reason = "none"
	}
	m.claims.WithLabelValues(result, reason).Inc()
	if isTakeover(result, reason) {
		m.takeovers.WithLabelValues(reason).Inc()
	}
}

// observeCommit records one durable transaction file of the log.
func (m *metrics) observeCommit(records, puts int) {
	m.txnRecords.Observe(float64(records))
	m.txnPuts.Observe(float64(puts))
}

// outcome names a store error for the s3 request counter.
func outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, bucket.ErrNotFound):
		return "not_found"
	case errors.Is(err, bucket.ErrPrecondition):
		return "precondition"
	case errors.Is(err, bucket.ErrConflict):
		return "conflict"
	case errors.Is(err, bucket.ErrAmbiguous):
		return "ambiguous"
	case errors.Is(err, bucket.ErrAccessDenied):
		return "denied"
	case errors.Is(err, bucket.ErrUnsupported):
		return "unsupported"
	case errors.Is(err, bucket.ErrNotS3):
		return "not_s3"
	default:
		return "unavailable"
	}
}

// instrumented counts and times every request the daemon sends, and tells
// h (when set) whether the store answered.
type instrumented struct {
	b bucket.Bucket
	m *metrics
	h *storeHealth
}

func (i instrumented) observe(ctx context.Context, op string, start time.Time, err error) {
	i.m.s3Requests.WithLabelValues(op, outcome(err)).Inc()
	i.m.s3Latency.WithLabelValues(op).Observe(time.Since(start).Seconds())
	if i.h == nil {
		return
	}
	if err != nil && errors.Is(ctx.Err(), context.Canceled) {
		// The caller gave up (a client gone, a request cut short by
		// the drain): that says nothing about the store. A deadline
		// is another matter: a store that hangs shows as one.
		i.h.log.Debug("store request cancelled by its caller", "op", op, "err", err)
		return
	}
	i.h.observe(op, err)
}

func (i instrumented) Get(ctx context.Context, key string, max int64) (bucket.Object, error) {
	start := time.Now()
	o, err := i.b.Get(ctx, key, max)
	i.observe(ctx, "get", start, err)
	return o, err
}

func (i instrumented) Head(ctx context.Context, key string) (bucket.Info, error) {
	start := time.Now()
	o, err := i.b.Head(ctx, key)
	i.observe(ctx, "head", start, err)
	return o, err
}

func (i instrumented) Put(ctx context.Context, key string, body []byte, c bucket.Condition) (string, error) {
	start := time.Now()
	etag, err := i.b.Put(ctx, key, body, c)
	i.observe(ctx, "put", start, err)
	return etag, err
}

func (i instrumented) Delete(ctx context.Context, key string, c bucket.Condition) error {
	start := time.Now()
	err := i.b.Delete(ctx, key, c)
	i.observe(ctx, "delete", start, err)
	return err
}

func (i instrumented) List(ctx context.Context, in bucket.ListInput) (bucket.ListPage, error) {
	start := time.Now()
	p, err := i.b.List(ctx, in)
	i.observe(ctx, "list", start, err)
	return p, err
}
