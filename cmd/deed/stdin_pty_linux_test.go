package main

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal pair: the controlling side and the
// terminal a program reads from.
func openPTY(t *testing.T) (ctl, tty *os.File) {
	t.Helper()
	ctl, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { ctl.Close() })
	if err := unix.IoctlSetPointerInt(int(ctl.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Skipf("unlock pty: %v", err)
	}
	n, err := unix.IoctlGetInt(int(ctl.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Skipf("pty number: %v", err)
	}
	tty, err = os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("open pty: %v", err)
	}
	t.Cleanup(func() { tty.Close() })
	return ctl, tty
}

// append reading its record from a terminal says so on stderr first, which
// would otherwise look like a hang.
func TestAppendHintOnATerminal(t *testing.T) {
	ctl, tty := openPTY(t)
	old := stdin
	stdin = tty
	defer func() { stdin = old }()
	// The terminal's line discipline turns Ctrl-D at a line's start into
	// the end of input.
	if _, err := ctl.WriteString("typed\n\x04"); err != nil {
		t.Fatal(err)
	}
	var errOut strings.Builder
	data, err := readRecordFromStdin(&config{inv: invocation{Stderr: &errOut}})
	if err != nil || string(data) != "typed\n" {
		t.Fatalf("read %q, %v", data, err)
	}
	if !strings.Contains(errOut.String(), "reading the record from standard input; end it with Ctrl-D") {
		t.Errorf("no hint on a terminal: %q", errOut.String())
	}
}
