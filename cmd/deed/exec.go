package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/owner"
	"github.com/deedkit/deed/replication"
)

// Environment variables exec adds to the command's environment.
const (
	envExecCell   = "DEED_CELL"
	envExecEpoch  = "DEED_EPOCH"
	envExecNode   = "DEED_NODE"
	envExecPrefix = "DEED_PREFIX"
)

// childExit carries the exit status of the command `deed exec` ran. The
// central error mapping (config.fail) passes it through as deed's own exit
// status and prints nothing: the command spoke for itself.
type childExit struct{ status int }

func (e *childExit) Error() string { return fmt.Sprintf("command exited with status %d", e.status) }

// errGuardExited ends an exec whose guard process died: the command is
// killed, since nothing would stop it in time were exec paused. Exit 3,
// as for a fenced node: the run's exclusivity can no longer be vouched for.
var errGuardExited = errcode.Errorf(errcode.CodeNodeFenced, "the exec guard process exited: nothing would stop the command in time if this process were paused")

// signalGrace is how long exec waits after an interrupt before it sends
// SIGTERM itself, when its context was cancelled without a signal reaching
// it (an in-process caller); a real signal is forwarded as it is.
const signalGrace = 100 * time.Millisecond

func newExecCmd(cfg *config) *cobra.Command {
	var (
		wait       time.Duration
		ttl        time.Duration
		grace      time.Duration
		foreground bool
	)
	cmd := &cobra.Command{
		Use:   "exec CELL [flags] -- CMD [ARGS...]",
		Short: "Run a command while holding a cell: a flock over S3",
		Long: `exec runs CMD while it holds CELL, like flock(1) with the lock in the
bucket. It runs under a node id of its own, <host>-exec-<random>, unless
--node names one (DEED_NODE is not read: it names the daemon). It opens a
node lease for that id (renewed every TTL/3 in the background), claims
CELL, runs CMD with these variables added to its environment:

  DEED_CELL    the cell
  DEED_EPOCH   the epoch of this claim
  DEED_NODE    exec's node id
  DEED_PREFIX  the claim's data prefix in the bucket, bucket prefix included:
               [PREFIX/]cells/CELL/ltx/e<EPOCH>/

and, when CMD exits, releases the cell and the node lease and exits with
CMD's exit status (128+N when a signal N killed it).

A cell held by a live node is DEED-E020, exit 4, and so is a --node that a
live process runs under; --wait DUR keeps trying through both for DUR (an
owner that releases is followed at once, a dead one after its TTL +
margin). SIGINT, SIGTERM and SIGHUP are forwarded to CMD, and exec waits for
it to exit. If the lease is lost while CMD runs (another node forced a claim,
an operator force-released the cell, or the node lease could not be renewed
in time), exec sends SIGTERM to CMD, SIGKILL after --grace, and exits 3
with DEED-E021 or DEED-E025. Ownership changes are noticed within TTL/3.

CMD runs in its own process group, and signals go to the whole group, so a
shell script's children are stopped with it; what is left of the group
when CMD exits is killed before the release. A command that reads the
terminal needs --foreground (it then stays in deed's process group, and
signals reach only CMD itself).

On Unix a guard process, in a process group of its own so that it is not
stopped or killed with exec, SIGKILLs CMD's group at the node's fence
deadline (TTL-margin after the last renewal that succeeded) unless exec
proved a later renewal, and at once if exec dies; peers may take the cell
only after TTL+margin. If the guard dies, exec kills CMD and exits 3. A
paused machine pauses the guard too: use DEED_EPOCH as a fencing token
where CMD writes.

exec writes only the ownership record and the node lease: it does not seal
the cell's log (a lock taken thousands of times must not pay for, or leave,
a seal each time). Use exec on cells used as locks; to take a cell away
from a daemon that writes its log, use 'deed claim --force'.

Execs on one host need nothing special: each has its own id. Two execs
given the same --node cannot both run: the second one finds the node lease
renewed by a live process and fails with DEED-E020 (within about TTL/3).
deed's own failures exit 1-5 with a DEED code on stderr; any other status
is CMD's.`,
		Example: `  deed exec nightly-report -- ./report.sh --full
  deed exec nightly-report --wait 10m --ttl 10s -- ./report.sh
  deed exec db-migrate --foreground -- psql "$DATABASE_URL"`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			cell, argv, err := splitExecArgs(cmd, args)
			if err != nil {
				return err
			}
			if _, err := cfg.ownIdentity(cmd, identityExec, ""); err != nil {
				return err
			}
			if err := cfg.validNames(true, cell); err != nil {
				return err
			}
			if wait < 0 || grace < 0 {
				return errcode.Errorf(errcode.CodeBadRequest, "--wait and --grace must not be negative")
			}
			if err := owner.ValidateTTL(ttl); err != nil {
				return errcode.Wrap(err, "--ttl")
			}
			path, err := exec.LookPath(argv[0])
			if err != nil {
				return errcode.Errorf(errcode.CodeBadRequest, "exec %s: cannot run %q: %w", cell, argv[0], err)
			}
			b, loc, err := cfg.openBucket(ctx)
			if err != nil {
				return err
			}
			log := cfg.nodeLog(cmd)
			n, err := owner.NewNode(b, owner.Config{Name: cfg.node, TTL: ttl, Logger: log})
			if err != nil {
				return errcode.Wrap(err, "--ttl")
			}
			// One --wait covers every "held" answer: the node id in use
			// (an explicit --node another live process runs under), then
			// the cell.
			hw := newHeldWait(wait, n.Params().TTL, log)
			if err := hw.retry(ctx, "node id", func() error { return n.Open(ctx) }); err != nil {
				return errcode.Wrap(liveNodeHint(err, "exec"), "exec %s", cell)
			}
			defer cfg.dropOwnLease(ctx, b, n, log) // after every path closed n
			l, err := hw.claim(ctx, n, cell, false, nil, execHeldHint)
			if err != nil {
				closeNode(ctx, n, log)
				return err
			}
			// The guard kills CMD's process group at the fence deadline
			// unless a renewal moved it, and at once if this process dies.
			g, err := startGuard(cfg.inv.Stderr)
			if err != nil {
				releaseAndClose(ctx, n, l, log)
				return errcode.Wrap(err, "exec %s", cell)
			}
			g.setDeadline(n.FenceDeadline())
			stopFeed := feedGuard(g, n)

			c := exec.Command(path, argv[1:]...)
			c.Args[0] = argv[0]
			c.Env = append(os.Environ(),
				envExecCell+"="+cell,
				envExecEpoch+"="+strconv.FormatUint(l.Epoch(), 10),
				envExecNode+"="+cfg.node,
				envExecPrefix+"="+dataPrefix(loc, cell, l.Epoch()),
			)
			c.Stdin, c.Stdout, c.Stderr = stdin, rawOutput(cfg.inv.Stdout), cfg.inv.Stderr
			c.SysProcAttr = procAttr(foreground)
			// A grandchild that keeps a piped stdout open must not keep
			// exec waiting once CMD itself has exited.
			c.WaitDelay = time.Second

			// The opened node re-reads the cell's record every TTL/3: a
			// takeover ends l, and supervise stops CMD.
			status, lost, err := supervise(ctx, c, l, g, grace, !foreground, log)
			stopFeed()
			g.finish()
			if err != nil { // CMD did not start
				releaseAndClose(ctx, n, l, log)
				return errcode.Errorf(errcode.CodeBadRequest, "exec %s: start %q: %w", cell, argv[0], err)
			}
			if errors.Is(lost, errGuardExited) {
				closeNode(ctx, n, log)
				return errcode.Wrap(lost, "exec %s: command killed (exit status %d)", cell, status)
			}
			if lost != nil {
				closeNode(ctx, n, log)
				return errcode.Wrap(lost, "exec %s: command stopped (exit status %d) because the lease was lost", cell, status)
			}
			if err := releaseAndClose(ctx, n, l, log); err != nil {
				switch errcode.CodeOf(err) {
				case errcode.CodeSuperseded, errcode.CodeNodeFenced:
					// The record changed under CMD before it finished: its
					// exclusive run cannot be vouched for.
					return errcode.Wrap(err, "exec %s: command exited with status %d, but the lease was lost before the release", cell, status)
				}
				log.Warn("release failed; the cell stays held until the node lease expires", "cell", cell, "err", err)
			}
			if status != 0 {
				return &childExit{status: status}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.DurationVar(&wait, "wait", 0, "keep trying this long while the cell (or, with --node, the node id) is held by a live process (0: exit 4 at once)")
	f.DurationVar(&ttl, "ttl", owner.DefaultTTL, "node lease TTL (renewed every TTL/3); the lease is fenced, and CMD stopped, if no renewal succeeds within TTL-margin")
	f.DurationVar(&grace, "grace", 10*time.Second, "after a lost lease, how long CMD gets between SIGTERM and SIGKILL")
	f.BoolVar(&foreground, "foreground", false, "keep CMD in deed's process group, for commands that read the terminal (signals then reach CMD only, not its children)")
	return cmd
}

// feedGuard keeps handing g the node's fence deadline, which moves only
// when a renewal succeeded, until the returned stop is called. It polls
// far more often than renewals happen (TTL/3), so the guard learns of a
// renewal within a small fraction of the margin.
func feedGuard(g *execGuard, n *owner.Node) (stop func()) {
	if g == nil {
		return func() {}
	}
	every := min(max(n.Params().TTL/50, 10*time.Millisecond), 200*time.Millisecond)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				g.setDeadline(n.FenceDeadline())
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}

// splitExecArgs splits "CELL -- CMD ARGS..." (or "CELL CMD ARGS..." when CMD
// and its arguments have no dashes deed would parse).
func splitExecArgs(cmd *cobra.Command, args []string) (string, []string, error) {
	switch dash := cmd.ArgsLenAtDash(); {
	case dash == -1 || dash == 1:
		return args[0], args[1:], nil
	default:
		return "", nil, errcode.Errorf(errcode.CodeBadRequest, "usage: deed exec CELL [flags] -- CMD [ARGS...]: want exactly one CELL before --, got %d", dash)
	}
}

// dataPrefix is the full key prefix of the claim's data, with the bucket
// URL's prefix in front.
func dataPrefix(loc bucket.Location, cell string, epoch uint64) string {
	p := replication.EpochPrefix(cell, epoch)
	if loc.Prefix != "" {
		p = loc.Prefix + "/" + p
	}
	return p
}

// releaseAndClose releases the lease and then the node, within
// releaseTimeout. It returns the release's error.
func releaseAndClose(ctx context.Context, n *owner.Node, l *owner.Lease, log *slog.Logger) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	err := l.Release(rctx)
	cancel()
	closeNode(ctx, n, log)
	return err
}

// supervise starts c and waits for it to exit. Signals deed receives
// (SIGINT, SIGTERM, SIGHUP) are forwarded; a cancelled ctx without a signal
// counts as SIGTERM. When the lease ends for any reason but a release, CMD
// gets SIGTERM, then SIGKILL after grace, and lost is the lease's error.
// group signals CMD's whole process group. g, the guard, learns what to
// kill once CMD started; if the guard dies, CMD is killed (nothing would
// stop it in time were this process paused) and lost says why. Once CMD
// exited, what is left of its process group is killed too: the lock covers
// the group, and it is released next. err is set only when c did not start.
func supervise(ctx context.Context, c *exec.Cmd, l *owner.Lease, g *execGuard, grace time.Duration, group bool, log *slog.Logger) (status int, lost, err error) {
	if err := l.Err(); err != nil {
		return 0, err, nil // lost between the claim and now: do not start
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, forwardSignals...)
	defer signal.Stop(sigs)

	started := make(chan error, 1)
	waited := make(chan error, 1)
	go func() {
		// On Linux the child is killed when the thread that started it
		// exits (Pdeathsig): keep this goroutine on its thread until the
		// child has been reaped.
		// Unlocking once it is reaped returns the thread to the pool
		// instead of ending it, which would kill any other child that
		// was forked from it with a death signal.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := c.Start(); err != nil {
			started <- err
			return
		}
		// At once: from now on the guard must know what to kill should
		// this process die.
		g.setTarget(c.Process.Pid, group)
		started <- nil
		waited <- c.Wait()
	}()
	if err := <-started; err != nil {
		return 0, nil, err
	}

	send := func(sig os.Signal) {
		if err := signalChild(c.Process, sig, group); err != nil {
			log.Debug("signal command", "signal", sig, "err", err)
		}
	}
	var (
		ctxDone    = ctx.Done()
		leaseDone  = l.Done()
		guardGone  = g.Exited()
		ctxTimer   <-chan time.Time
		killTimer  <-chan time.Time
		signalSeen bool
	)
	for {
		select {
		case werr := <-waited:
			if c.ProcessState == nil {
				return 1, lost, nil // cannot happen after a successful Start
			}
			if werr != nil && !errors.Is(werr, exec.ErrWaitDelay) {
				log.Debug("command wait", "err", werr)
			}
			if group {
				// CMD's children that outlived it (a background job).
				// The group's id stays reserved while any member lives.
				send(sigKILL)
			}
			return exitStatus(c.ProcessState), lost, nil
		case <-guardGone:
			guardGone = nil
			if lost == nil {
				lost = errGuardExited
			}
			log.Error("exec guard exited; killing the command", "cell", l.Cell())
			send(sigKILL)
		case sig := <-sigs:
			signalSeen, ctxTimer = true, nil
			send(sig)
		case <-ctxDone:
			ctxDone = nil
			if !signalSeen {
				ctxTimer = time.After(signalGrace)
			}
		case <-ctxTimer:
			ctxTimer = nil
			if !signalSeen {
				send(sigTERM)
			}
		case <-leaseDone:
			leaseDone = nil
			if err := l.Err(); errcode.CodeOf(err) != errcode.CodeReleased {
				lost = err
				log.Info("lease lost; stopping the command", "cell", l.Cell(), "err", err)
				send(sigTERM)
				killTimer = time.After(grace)
			}
		case <-killTimer:
			killTimer = nil
			send(sigKILL)
		}
	}
}
