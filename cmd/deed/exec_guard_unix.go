//go:build unix

package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The exec guard is a watchdog that is not paused with deed exec: a
// re-exec of the deed binary in a hidden mode (envGuard=1), in a process
// group of its own, so that neither SIGSTOP of exec (or of exec's group,
// as a terminal's Ctrl-Z sends) nor the death of exec stops it. exec feeds
// it over a pipe, its stdin, one line at a time:
//
//	deadline <ns>   the node's fence deadline, on CLOCK_MONOTONIC (which
//	                every process of the machine shares); exec sends a later
//	                one only after a node-lease renewal succeeded
//	target <n>      what to kill, as kill(2) takes it: -pgid for the
//	                command's process group, pid with --foreground
//	done            the command was reaped: exit
//
// The guard SIGKILLs the target when the deadline passes without a later
// one, and at once when its stdin ends without "done" (exec died: kill -9,
// a crash). exec, in turn, kills the command when the guard dies.

// envGuard selects the guard mode of the binary (main and TestMain).
const envGuard = "DEED_EXEC_GUARD"

// guardMode reports whether this process was started as an exec guard.
func guardMode() bool { return os.Getenv(envGuard) == "1" }

// monoNow reads CLOCK_MONOTONIC, the clock the guard and exec share.
func monoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(fmt.Sprintf("clock_gettime(CLOCK_MONOTONIC): %v", err)) // cannot fail on a supported OS
	}
	return ts.Nano()
}

// runGuard is the guard process: it reads exec's lines from in and kills
// the target at the deadline or when in ends. Messages go to errw. It
// returns the process's exit status: 0 after "done", 1 when exec vanished.
func runGuard(in io.Reader, errw io.Writer) int {
	// Not a terminal's business: the guard lives as long as exec does.
	signal.Ignore(syscall.SIGINT, syscall.SIGHUP, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU)
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var (
		deadline int64 // CLOCK_MONOTONIC ns; 0 = none yet
		target   int
		killed   bool
	)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	kill := func(why string) {
		if target == 0 || killed {
			return
		}
		killed = true
		err := syscall.Kill(target, syscall.SIGKILL)
		what := fmt.Sprintf("process group %d", -target)
		if target > 0 {
			what = fmt.Sprintf("process %d", target)
		}
		if err != nil && !errors.Is(err, syscall.ESRCH) {
			fmt.Fprintf(errw, "deed exec guard: %s, but killing %s failed: %v\n", why, what, err)
			return
		}
		fmt.Fprintf(errw, "deed exec guard: %s: killed %s\n", why, what)
	}
	expired := func() bool { return deadline != 0 && monoNow() >= deadline }
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				kill("deed exec died (nothing renews its lease)")
				return 1
			}
			verb, arg, _ := strings.Cut(line, " ")
			n, _ := strconv.ParseInt(arg, 10, 64)
			switch verb {
			case "done":
				return 0
			case "deadline":
				deadline = n
			case "target":
				target = int(n)
			}
			if expired() {
				kill("the fence deadline passed with no renewal proven")
			} else if deadline != 0 {
				timer.Reset(time.Duration(deadline - monoNow()))
			}
		case <-timer.C:
			if expired() {
				kill("the fence deadline passed with no renewal proven")
			}
		}
	}
}

// execGuard is exec's handle on its guard process. A nil execGuard does nothing.
type execGuard struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	w      io.WriteCloser
	last   time.Time // the last deadline sent
	exited chan struct{}
	done   bool
}

// startGuard starts the guard process, writing its messages to stderr.
func startGuard(stderr io.Writer) (*execGuard, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("start exec guard: %w", err)
	}
	c := exec.Command(self)
	c.Env = append(os.Environ(), envGuard+"=1")
	c.Stdout, c.Stderr = nil, stderr
	// Its own process group: not stopped with exec's group, not killed by
	// signals sent to it. No death signal: it must outlive exec.
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	w, err := c.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("start exec guard: %w", err)
	}
	if err := c.Start(); err != nil {
		return nil, fmt.Errorf("start exec guard %s: %w", self, err)
	}
	g := &execGuard{cmd: c, w: w, exited: make(chan struct{})}
	go func() {
		_ = c.Wait()
		close(g.exited)
	}()
	return g, nil
}

// send writes one line; errors mean the guard is gone, which Exited says.
func (g *execGuard) send(line string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.done {
		return
	}
	_, _ = io.WriteString(g.w, line+"\n")
}

// setDeadline hands the guard the fence deadline d, if it moved.
func (g *execGuard) setDeadline(d time.Time) {
	if g == nil || d.IsZero() {
		return
	}
	g.mu.Lock()
	same := d.Equal(g.last)
	g.last = d
	g.mu.Unlock()
	if same {
		return
	}
	// Read the shared clock before the time left, so that a pause between
	// the two can only move the guard's deadline earlier.
	now := monoNow()
	g.send("deadline " + strconv.FormatInt(now+int64(time.Until(d)), 10))
}

// setTarget tells the guard what to kill: the process group of pid, or
// pid alone.
func (g *execGuard) setTarget(pid int, group bool) {
	if g == nil {
		return
	}
	if group {
		pid = -pid
	}
	g.send("target " + strconv.Itoa(pid))
}

// Exited is closed when the guard process has exited.
func (g *execGuard) Exited() <-chan struct{} {
	if g == nil {
		return nil
	}
	return g.exited
}

// finish tells the guard the command was reaped and waits for it to exit.
func (g *execGuard) finish() {
	if g == nil {
		return
	}
	g.send("done")
	g.mu.Lock()
	g.done = true
	_ = g.w.Close()
	g.mu.Unlock()
	select {
	case <-g.exited:
	case <-time.After(5 * time.Second):
		_ = g.cmd.Process.Kill()
		<-g.exited
	}
}
