package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/internal/wait"
	"github.com/deedkit/deed/owner"
)

// Helpers shared by the cell commands (claim, release, show, ls, nodes,
// exec, gc, append, read).

// stdin is what `deed append` reads its record from and what `deed exec`
// hands its child. A variable so that in-process tests can replace it.
var stdin io.Reader = os.Stdin

// releaseTimeout bounds the release of a cell and of the node lease when a
// holding command (claim --hold, exec) ends, so that a store outage cannot
// keep deed from exiting. A release that does not finish in time leaves the
// node lease to expire: peers take over after TTL+margin instead of at once.
const releaseTimeout = 10 * time.Second

// getenv reads deed's environment through the invocation (tests pass their
// own).
func (cfg *config) getenv(key string) string {
	if cfg.inv.Getenv == nil {
		return ""
	}
	return cfg.inv.Getenv(key)
}

// validNames checks --node (when the command acts as a node) and every cell
// name, before any request is sent: a bad name is DEED-E001, exit 2, and
// nothing is written.
func (cfg *config) validNames(withNode bool, cells ...string) error {
	if withNode {
		if err := owner.ValidateName("node", cfg.node); err != nil {
			return errcode.Wrap(err, "--node")
		}
	}
	for _, c := range cells {
		if err := owner.ValidateName("cell", c); err != nil {
			return err
		}
	}
	return nil
}

// nodeLog is the logger handed to an owner.Node. Its info lines ("node
// opened", "claimed") are the daemon's business; a CLI command prints its
// own result, so they are shown only when --log-level was given explicitly.
// Warnings (a failed renewal) and errors (a fence) always show.
func (cfg *config) nodeLog(cmd *cobra.Command) *slog.Logger {
	if cmd.Flags().Changed("log-level") {
		return cfg.log
	}
	opts := &slog.HandlerOptions{Level: slog.LevelWarn}
	if cfg.json {
		return slog.New(slog.NewJSONHandler(cfg.inv.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(cfg.inv.Stderr, opts))
}

// pollInterval is how often a waiting claim tries again: a tenth of the TTL
// within [100ms, 1s], so a released cell is noticed quickly and a dead
// owner is noticed within one poll of TTL+margin.
func pollInterval(ttl time.Duration) time.Duration {
	return min(max(ttl/10, 100*time.Millisecond), time.Second)
}

// heldWait retries an attempt that is refused because something is held
// (DEED-E020: the cell by a live node, or the node id by a live process)
// until a deadline. Every step that can answer "held" goes through one
// heldWait, so --wait covers all of them with one budget.
type heldWait struct {
	wait     time.Duration
	deadline time.Time
	poll     time.Duration
	log      *slog.Logger
	logged   bool
}

// newHeldWait starts the clock for --wait DUR; ttl sets the poll interval.
func newHeldWait(wait, ttl time.Duration, log *slog.Logger) *heldWait {
	return &heldWait{wait: wait, deadline: time.Now().Add(wait), poll: pollInterval(ttl), log: log}
}

// retry calls try until it succeeds, fails with anything but DEED-E020,
// or the wait has passed (a zero wait tries once).
func (w *heldWait) retry(ctx context.Context, what string, try func() error) error {
	for {
		err := try()
		if err == nil {
			return nil
		}
		if errcode.CodeOf(err) != errcode.CodeHeld || w.wait <= 0 {
			return err
		}
		left := time.Until(w.deadline)
		if left <= 0 {
			return errcode.Wrap(err, "still held after waiting %v", w.wait)
		}
		if !w.logged {
			w.logged = true
			w.log.Info(what+" held; waiting", "wait", w.wait, "err", err)
		}
		if serr := wait.Sleep(ctx, min(w.poll, left)); serr != nil {
			return errcode.Wrap(err, "interrupted while waiting")
		}
	}
}

// claim claims cell with n, retrying while it is held. It uses the same
// Node every time, so the node's Observer accumulates history: an owner
// whose node lease stays unchanged for TTL+margin is judged dead and taken
// over. before, when set, runs before each attempt (a check that may
// answer "held" too). A refusal because the cell is held ends with next,
// what the command can do about it.
func (w *heldWait) claim(ctx context.Context, n *owner.Node, cell string, force bool, before func() error, next string) (*owner.Lease, error) {
	var l *owner.Lease
	err := w.retry(ctx, "cell", func() error {
		if before != nil {
			if err := before(); err != nil {
				return err
			}
		}
		var err error
		l, err = n.Claim(ctx, cell, owner.ClaimOptions{Force: force})
		return err
	})
	var held *owner.HeldError
	if errors.As(err, &held) && next != "" {
		err = errcode.Errorf(errcode.CodeHeld, "%s; %s", strings.TrimPrefix(err.Error(), string(errcode.CodeHeld)+" "), next)
	}
	return l, err
}

// The next steps after a refusal because a live node holds the cell:
// claim can wait or force, exec can only wait (forcing a cell from the
// daemon that writes its log is claim's act).
const (
	claimHeldHint = "--wait DURATION waits for it to be released or its holder to die; --force takes it over now, cutting the holder off"
	execHeldHint  = "--wait DURATION waits for it to be released or its holder to die"
)

// closeNode releases every cell the node still holds and its node lease,
// within releaseTimeout even when ctx was cancelled (an interrupt).
func closeNode(ctx context.Context, n *owner.Node, log *slog.Logger) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if err := n.Close(cctx); err != nil {
		log.Warn("closing the node failed; its lease will expire instead", "node", n.Name(), "err", err)
	}
}

// cellPage is one page of cell names under cells/.
type cellPage struct {
	cells []string
	token string
}

// listCells lists the cells whose names start with prefix, one page at a
// time: a LIST of cells/ with delimiter "/", so every cell costs one common
// prefix however many files it has. Prefixes that are not valid cell names
// (nothing deed wrote) are skipped.
func listCells(ctx context.Context, b bucket.Bucket, prefix string, fn func([]string) error) error {
	token := ""
	for {
		page, err := b.List(ctx, bucket.ListInput{Prefix: "cells/" + prefix, Delimiter: "/", Token: token})
		if err != nil {
			return errcode.Wrap(err, "list cells")
		}
		var names []string
		for _, p := range page.Prefixes {
			name := strings.TrimSuffix(strings.TrimPrefix(p, "cells/"), "/")
			if owner.ValidateName("cell", name) == nil {
				names = append(names, name)
			}
		}
		if len(names) > 0 {
			if err := fn(names); err != nil {
				return err
			}
		}
		if page.NextToken == "" {
			return nil
		}
		token = page.NextToken
	}
}

// validPrefix checks a cell-name prefix (--prefix of ls): empty, or the
// start of a valid name.
func validPrefix(p string) error {
	if p == "" || p == "." || p == ".." {
		return nil
	}
	if err := owner.ValidateName("cell", p); err != nil {
		return errcode.Wrap(err, "--prefix")
	}
	return nil
}
