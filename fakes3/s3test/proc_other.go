//go:build !linux

package s3test

import "os/exec"

// setDeathSignal has no portable equivalent outside Linux; s3test.Main's
// cleanup is the only thing that stops the gateway there.
func setDeathSignal(*exec.Cmd) {}
