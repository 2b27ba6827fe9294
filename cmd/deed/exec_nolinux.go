//go:build unix && !linux

package main

import "syscall"

// setDeathSignal: only Linux can have the command killed when deed dies.
func setDeathSignal(*syscall.SysProcAttr) {}
