//go:build !unix

package daemon

import "time"

// cpuTime is 0 where getrusage is missing: the CPU metrics are then left out.
func cpuTime() time.Duration { return 0 }
