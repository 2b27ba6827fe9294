package main

import "github.com/deedkit/deed/daemon/daemontest"

// appendAnswer is what one `deed append` was told.
type appendAnswer = daemontest.Answer
