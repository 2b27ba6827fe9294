package main

import (
	"testing"

	"github.com/deedkit/deed/errcode"
)

// Every code has the exit status docs/errors.md documents: scripts branch on
// it, so it must not change when codes are added.
func TestCodeExitStatus(t *testing.T) {
	for code, want := range map[errcode.Code]int{
		"":                       0,
		errcode.CodeInvalidName:  2,
		errcode.CodeContract:     5,
		errcode.CodeUnavailable:  1,
		errcode.CodeAmbiguous:    1,
		errcode.CodeHeld:         4,
		errcode.CodeSuperseded:   3,
		errcode.CodeReleased:     3,
		errcode.CodeInvalidLease: 2,
		errcode.CodeNotHolder:    4,
		errcode.CodeNodeFenced:   3,
		errcode.CodeCorruptOwner: 1,
		errcode.CodeCorruptTx:    1,
		errcode.CodeCorruptStore: 1,
		errcode.CodeBadRequest:   2,
		errcode.CodeUnauthorized: 2,
		errcode.CodeKeyReused:    2,
		errcode.CodePosMismatch:  6,
		errcode.CodeOutput:       1,
		"DEED-E999":              1,
	} {
		if got := codeExitStatus(code); got != want {
			t.Errorf("codeExitStatus(%q) = %d, want %d", code, got, want)
		}
	}
}
