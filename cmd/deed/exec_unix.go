//go:build unix

package main

import (
	"errors"
	"os"
	"syscall"
)

// forwardSignals are the signals exec passes on to its command.
var forwardSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

var (
	sigTERM os.Signal = syscall.SIGTERM
	sigKILL os.Signal = syscall.SIGKILL
)

// procAttr puts the command in its own process group (so that signals reach
// its children too), unless it must stay in the foreground to use the
// terminal; and, where the OS supports it, has it killed when deed dies.
func procAttr(foreground bool) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: !foreground}
	setDeathSignal(a)
	return a
}

// signalChild sends sig to the command, or to its whole process group.
func signalChild(p *os.Process, sig os.Signal, group bool) error {
	if !group {
		return p.Signal(sig)
	}
	s, ok := sig.(syscall.Signal)
	if !ok {
		return errors.New("not a syscall signal")
	}
	return syscall.Kill(-p.Pid, s)
}

// exitStatus is the command's exit status as a shell reports it: its exit
// code, or 128+N when signal N killed it.
func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}
