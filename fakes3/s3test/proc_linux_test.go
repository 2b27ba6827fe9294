package s3test

import (
	"os/exec"
	"runtime"
	"testing"
	"time"
)

// A child started by startProc must outlive the thread its caller ran on:
// Linux delivers the death signal when the thread that forked the child
// exits, not the process, and the Go runtime ends a thread whenever a
// goroutine exits while locked to it (as deed exec's supervisor did). Each
// caller here is such a goroutine. When startProc forked from its caller's
// thread, the gateway of cmd/deed's tests was killed this way half-way
// through a CI run. (A caller that lands on the main thread is not ended
// but parked, hence several callers.)
func TestChildSurvivesItsCallersThread(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary to use as a child process")
	}
	const n = 4
	procs := make([]*proc, n)
	for i := range procs {
		started := make(chan error)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
			cmd := exec.Command(sleep, "60")
			setDeathSignal(cmd)
			var err error
			procs[i], err = startProc(cmd)
			started <- err
		}()
		if err := <-started; err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		for _, p := range procs {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}()
	time.Sleep(300 * time.Millisecond)
	for i, p := range procs {
		select {
		case <-p.done:
			t.Errorf("child %d was killed when its caller's thread ended: %v", i, p.err)
		default:
		}
	}
}
