package main

import "syscall"

// setDeathSignal has the command killed when deed dies (SIGKILL, kill -9,
// a crash): nothing renews the lease any more, so after TTL+margin another
// node may claim the cell, and the command must not outlive deed's claim.
func setDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
