package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/internal/wait"
	"github.com/deedkit/deed/owner"
)

// nodeRow is one node lease in nodes' output.
type nodeRow struct {
	Node        string `json:"node"`
	Addr        string `json:"addr"`
	Incarnation string `json:"incarnation,omitempty"`
	TTLMS       int64  `json:"ttl_ms"`
	// State is "alive" (its lease was seen to change during the watch),
	// "unknown" (not seen to change, but not watched long enough to call it
	// dead), "dead" (unchanged for TTL+margin), "released" (clean exit),
	// "missing" (deleted during the watch) or "corrupt" (the lease is not a
	// valid node lease: Code and Error say why; Alive still applies, judged
	// by the lease's ETag alone with --ttl).
	State string `json:"state"`
	// Alive is the takeover rule: false when a claimer may take this node's
	// cells over. "unknown" counts as alive.
	Alive       bool  `json:"alive"`
	Released    bool  `json:"released"`
	UnchangedMS int64 `json:"unchanged_ms"`
	WatchedMS   int64 `json:"watched_ms"`
	// Cells is how many cells the node held at its last renewal; Draining
	// and Weight are its placement state (weight 1 unless set).
	Cells    int     `json:"cells"`
	Draining bool    `json:"draining"`
	Weight   float64 `json:"weight"`
	// Verified, with --fleet-secret-file, says the lease verifies under the
	// fleet secret: only then is the node a member (forwarded requests,
	// handoffs, placement). Absent without the secret.
	Verified *bool `json:"verified,omitempty"`
	// Code and Error are set for a corrupt lease (DEED-E030).
	Code  errcode.Code `json:"code,omitempty"`
	Error string       `json:"error,omitempty"`
}

func newNodesCmd(cfg *config) *cobra.Command {
	var (
		watch      time.Duration
		ttl        time.Duration
		secretFile string
	)
	cmd := &cobra.Command{
		Use:   "nodes",
		Short: "List node leases and judge which nodes are alive",
		Long: `nodes lists every node lease under nodes/ (one LIST, plus a GET of each lease)
and judges each node the way a claimer does: a node is dead when its lease is
missing, marked released, or seen unchanged for longer than its TTL + margin
on this process's own clock. Writers' timestamps are never compared.

One look cannot see a lease change, so without --watch every lease that is
present and not released is "unknown" (and counted as alive, as a claimer
would). --watch DUR refreshes the view for DUR (one LIST per refresh): a node
seen renewing is "alive", one whose lease stayed unchanged for TTL+margin is
"dead". Watch for at least TTL+margin to tell them apart.

--ttl is the least TTL assumed for every node (the TTL a node advertises in
its lease is used when longer); the margin is min(1s, TTL/10).

A lease that is not a valid node lease (not JSON, too large, naming another
node, without an incarnation, or advertising a TTL outside 1s..1h) is shown
as "corrupt" with its DEED-E030 error; it is judged by its ETag alone, with
--ttl, like any lease that stops changing.

CELLS is how many cells the node held at its last renewal (at most TTL/3
old), DRAINING says it is draining (deed drain: it hands its cells off and
takes no new ones), WEIGHT is its placement share (--weight, 1 unless set).
VERIFIED, with --fleet-secret-file, says whether the lease is signed with
the fleet secret: a lease that is not ("NO") was written by someone without
it; it is no member (no node sends it requests or cells), though it is
still judged alive or dead for takeover. Without the secret it shows "?".

With --json it prints one JSON object per line: {"node","addr","incarnation",
"ttl_ms","state","alive","released","unchanged_ms","watched_ms","cells",
"draining","weight"}, plus "verified" with --fleet-secret-file and "code"
and "error" for a corrupt lease.`,
		Example: `  deed nodes
  deed nodes --watch 12s --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if watch < 0 {
				return errcode.Errorf(errcode.CodeBadRequest, "--watch %v: must not be negative", watch)
			}
			p := owner.Params{TTL: ttl, Margin: min(owner.DefaultMargin, ttl/10)}
			if err := p.Validate(); err != nil {
				return errcode.Wrap(err, "--ttl")
			}
			if !cmd.Flags().Changed("fleet-secret-file") {
				secretFile = cfg.getenv(envFleetSecret)
			}
			var key []byte
			if secretFile != "" {
				secret, err := readFleetSecret(secretFile)
				if err != nil {
					return err
				}
				key = owner.LeaseKey(secret)
			}
			b, _, err := cfg.openBucket(ctx)
			if err != nil {
				return err
			}
			obs := owner.NewObserver(b, p).VerifyWith(key)
			start := time.Now()
			if err := obs.Refresh(ctx); err != nil {
				return errcode.Wrap(err, "nodes")
			}
			first := time.Now() // an ETag first seen after this changed during the watch
			if watch > 0 {
				every := min(max(ttl/6, 50*time.Millisecond), time.Second)
				end := start.Add(watch)
				for {
					left := time.Until(end)
					if left <= 0 {
						break
					}
					if err := wait.Sleep(ctx, min(every, left)); err != nil {
						break // interrupted: show what was seen so far
					}
					if err := obs.Refresh(ctx); err != nil {
						if ctx.Err() != nil {
							break
						}
						return errcode.Wrap(err, "nodes")
					}
				}
			}
			now := time.Now()
			watched := now.Sub(start)
			var rows []nodeRow
			for _, v := range obs.View() {
				r := nodeRow{Node: v.Node, Addr: v.Addr, Alive: v.Alive, Released: v.Released,
					UnchangedMS: v.Unchanged.Milliseconds(), WatchedMS: watched.Milliseconds(),
					Cells: v.Cells, Draining: v.Draining, Weight: owner.NodeRecord{Weight: v.Weight}.EffectiveWeight()}
				changed := false
				// Right after a Refresh the observation is fresh: this reads
				// no lease, it returns what the view was built from.
				if ob, err := obs.Observe(context.WithoutCancel(ctx), v.Node); err == nil {
					r.Incarnation, r.TTLMS = ob.Incarnation, ob.TTL.Milliseconds()
					r.Alive = owner.Alive(ob, now, p)
					changed = ob.FirstSeen.After(first)
				}
				r.State = nodeState(v, r.Alive, changed)
				if v.Corrupt != "" {
					r.Code, r.Error = errcode.CodeCorruptOwner, v.Corrupt
				}
				if key != nil {
					r.Verified = &v.Verified
				}
				rows = append(rows, r)
			}
			if cfg.json {
				for _, r := range rows {
					writeJSON(cfg.inv.Stdout, r)
				}
				return nil
			}
			tw := tabwriter.NewWriter(cfg.inv.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NODE\tSTATE\tADDR\tTTL\tUNCHANGED\tCELLS\tDRAINING\tWEIGHT\tVERIFIED")
			for _, r := range rows {
				verified := "?" // no --fleet-secret-file: cannot tell
				if r.Verified != nil {
					verified = map[bool]string{true: "yes", false: "NO"}[*r.Verified]
				}
				addr := r.Addr
				if addr == "" {
					addr = "-"
				}
				draining := "-"
				if r.Draining {
					draining = "yes"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%v\t%d\t%s\t%g\t%s\n", r.Node, r.State, addr,
					time.Duration(r.TTLMS)*time.Millisecond, (time.Duration(r.UnchangedMS) * time.Millisecond).Round(time.Millisecond),
					r.Cells, draining, r.Weight, verified)
			}
			if err := tw.Flush(); err != nil {
				return errcode.Errorf(errcode.CodeUnavailable, "write: %w", err)
			}
			for _, r := range rows {
				if r.Error != "" {
					fmt.Fprintf(cfg.inv.Stdout, "%s: %s\n", r.Node, r.Error)
				}
			}
			unknown, need := false, ttl
			for _, r := range rows {
				if r.State == "unknown" {
					unknown, need = true, max(need, time.Duration(r.TTLMS)*time.Millisecond)
				}
			}
			for _, r := range rows {
				if r.Verified != nil && !*r.Verified {
					fmt.Fprintf(cfg.inv.Stdout, "%s: unverified: its lease is not signed with this fleet secret, so it is no member (no node sends it requests or cells); it is still judged alive or dead for takeover\n", r.Node)
				}
			}
			if unknown {
				fmt.Fprintf(cfg.inv.Stdout, "(\"unknown\": not seen to change yet, may be dead; --watch %v or longer tells)\n", need+p.Margin)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.DurationVar(&watch, "watch", 0, "watch the leases this long before judging (at least TTL+margin to tell dead from alive)")
	f.DurationVar(&ttl, "ttl", owner.DefaultTTL, "least node TTL assumed when judging (a longer TTL advertised in a lease wins)")
	registerLeaseSecret(cmd, &secretFile)
	return cmd
}

// nodeState names what one watch can tell of a node: only a lease seen to
// change during the watch is known alive; one that did not change may be a
// live node between renewals, so it is "unknown" until judged dead.
func nodeState(v owner.NodeView, alive, changed bool) string {
	switch {
	case v.Released:
		return "released"
	case !v.Exists:
		return "missing"
	case v.Corrupt != "":
		return "corrupt"
	case !alive:
		return "dead"
	case changed:
		return "alive"
	default:
		return "unknown"
	}
}
