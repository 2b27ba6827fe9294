// Command deed is the command-line interface to deed: it probes a bucket for
// the conditional-write contract, serves a fake S3 store for development,
// and (in later versions) runs the node daemon and operates on cells.
//
// Every error it prints starts with a stable DEED-Ennn code, and its exit
// status is a function of that code alone (codeExitStatus), so that
// scripts can branch on the status without parsing messages.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if guardMode() {
		// deed exec's watchdog (exec_guard_unix.go), not a command.
		os.Exit(runGuard(os.Stdin, os.Stderr))
	}
	// SIGINT/SIGTERM cancel the context: long-running commands (fakes3, and
	// later the daemon) shut down cleanly, and a probe cleans up its keys.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	status := run(ctx, invocation{
		Args:   os.Args[1:],
		Stdout: os.Stdout,
		Stderr: os.Stderr,
		Getenv: os.Getenv,
	})
	stop()
	os.Exit(status)
}
