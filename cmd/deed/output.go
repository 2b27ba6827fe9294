package main

import (
	"encoding/json"
	"io"
	"sync"
)

// writeJSON prints v as one line of JSON. Its error is not returned: an
// encoding error is a bug in deed's own types, and a write error is kept
// by stdout itself (outputWriter), which fails the command.
func writeJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// outputWriter is the CLI's stdout. It keeps the first write error, so
// that a result cut short (a full disk, a closed pipe) fails the command
// with DEED-E050 however the command wrote it (run), instead of exiting 0
// with half an answer.
type outputWriter struct {
	w   io.Writer
	mu  sync.Mutex
	err error
}

func (o *outputWriter) Write(p []byte) (int, error) {
	n, err := o.w.Write(p)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	if err != nil {
		o.mu.Lock()
		if o.err == nil {
			o.err = err
		}
		o.mu.Unlock()
	}
	return n, err
}

// failed is the first write error, or nil.
func (o *outputWriter) failed() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err
}

// rawOutput is the writer under stdout, for a child process that must get
// the file itself (deed exec), not a pipe copied through this process.
func rawOutput(w io.Writer) io.Writer {
	if o, ok := w.(*outputWriter); ok {
		return o.w
	}
	return w
}
