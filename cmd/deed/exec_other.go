//go:build !unix

package main

import (
	"os"
	"syscall"
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
