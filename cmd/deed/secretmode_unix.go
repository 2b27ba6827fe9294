//go:build unix

package main

import (
	"fmt"
	"io/fs"
	"syscall"
)

// secretModeError refuses a secret file that users other than its owner
// may read or write, naming the fix. One case is let through: a file owned
// by root that its group may only read (0640, 0440), the usual way to hand
// a root-managed secret to a service's group, which the group's members
// are meant to read. Anything writable by the group, or open to others, is
// refused whoever owns it (a Kubernetes secret volume's default 0644
// included: set its defaultMode to 0400, or 0440 with an fsGroup).
func secretModeError(path string, fi fs.FileInfo) error {
	perm := fi.Mode().Perm()
	if perm&0o077 == 0 {
		return nil
	}
	if perm&0o037 == 0 {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid == 0 {
			return nil
		}
	}
	return fmt.Errorf("mode %04o lets other users read it: chmod 600 %s (or, owned by root, 640 for the service's group)", perm, path)
}
