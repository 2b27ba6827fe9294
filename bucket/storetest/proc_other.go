//go:build !linux

package storetest

import "os/exec"

// setDeathSignal has no portable equivalent off Linux: a crashed test
// binary may leave its emulator running there.
func setDeathSignal(*exec.Cmd) {}
