package s3test

import "os/exec"

// StartProcess starts cmd the way this package starts versitygw, for other
// test harnesses' servers (bucket/storetest's emulators): from a goroutine
// locked to its OS thread until the child is reaped, so that a death
// signal set with SetDeathSignal fires only when the test binary dies (see
// startProc). done is closed when the process has exited; exitErr then
// returns its exit status.
func StartProcess(cmd *exec.Cmd) (done <-chan struct{}, exitErr func() error, err error) {
	p, err := startProc(cmd)
	if err != nil {
		return nil, nil, err
	}
	return p.done, func() error { return p.err }, nil
}

// SetDeathSignal makes the kernel kill cmd's process when the test binary
// dies without its cleanups (Linux; a no-op elsewhere).
func SetDeathSignal(cmd *exec.Cmd) { setDeathSignal(cmd) }

// FreeAddr picks a free 127.0.0.1 port by binding :0 and releasing it;
// another process can take it in between, so a server started on it must
// prove it is the one answering.
func FreeAddr() (string, error) { return freeAddr() }
