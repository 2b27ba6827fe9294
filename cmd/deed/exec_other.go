//go:build !unix

package main

import (
	"io"
	"os"
	"syscall"
	"time"
)

// forwardSignals are the signals exec passes on to its command.
var forwardSignals = []os.Signal{os.Interrupt}

var (
	sigTERM os.Signal = os.Kill // no SIGTERM to send here: terminate
	sigKILL os.Signal = os.Kill
)

func procAttr(bool) *syscall.SysProcAttr { return nil }

func signalChild(p *os.Process, sig os.Signal, _ bool) error {
	if err := p.Signal(sig); err != nil {
		return p.Kill()
	}
	return nil
}

func exitStatus(ps *os.ProcessState) int { return ps.ExitCode() }

// guard: only unix has the exec guard process; elsewhere exec relies on
// its own renewals and signals.
type execGuard struct{}

func guardMode() bool                          { return false }
func runGuard(io.Reader, io.Writer) int        { return 2 }
func startGuard(io.Writer) (*execGuard, error) { return nil, nil }
func (*execGuard) setDeadline(time.Time)       {}
func (*execGuard) setTarget(int, bool)         {}
func (*execGuard) Exited() <-chan struct{}     { return nil }
func (*execGuard) finish()                     {}
