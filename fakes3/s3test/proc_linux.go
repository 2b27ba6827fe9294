package s3test

import (
	"os/exec"
	"syscall"
)

// setDeathSignal makes the kernel kill the child if the test binary dies
// without running s3test.Main's cleanup (a panic in TestMain, a SIGKILL
// from `go test -timeout`), so a crashed run does not leave a gateway
// listening.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
