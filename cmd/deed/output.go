package main

import (
	"encoding/json"
	"io"
)

// writeJSON prints v as one line of JSON. An encoding error is a bug in
// deed's own types, and the write error of a closed stdout has nowhere to go,
// so neither is returned.
func writeJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}
