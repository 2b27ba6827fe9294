package storetest

import (
	"os/exec"
	"syscall"
)

// setDeathSignal makes the kernel kill the emulator if the test binary dies
// without running its cleanups, so a crashed run leaves nothing listening.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
