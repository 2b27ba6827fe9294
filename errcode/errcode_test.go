package errcode_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/deedkit/deed/errcode"
)

// coded is an error type of another package that names its own code.
type coded struct{}

func (coded) Error() string           { return "held elsewhere" }
func (coded) ErrorCode() errcode.Code { return errcode.CodeHeld }

// A code leads every message, survives wrapping (by Wrap and by
// fmt.Errorf's %w), and the cause stays reachable.
func TestCodeSurvivesWrapping(t *testing.T) {
	base := errcode.Errorf(errcode.CodeSuperseded, "append to %s: %w", "c", context.Canceled)
	if got := base.Error(); got != "DEED-E021 append to c: context canceled" {
		t.Errorf("Errorf: %q", got)
	}
	w := errcode.Wrap(fmt.Errorf("outer: %w", base), "claim %s", "c")
	if got := w.Error(); got != "DEED-E021 claim c: outer: DEED-E021 append to c: context canceled" {
		t.Errorf("Wrap: %q", got)
	}
	if errcode.CodeOf(w) != errcode.CodeSuperseded || !errors.Is(w, context.Canceled) ||
		!errors.Is(w, &errcode.Error{Code: errcode.CodeSuperseded}) || errors.Is(w, &errcode.Error{Code: errcode.CodeHeld}) {
		t.Errorf("wrapped error lost its code or cause: %v", w)
	}
	if errcode.Wrap(nil, "x") != nil {
		t.Error("Wrap(nil) is not nil")
	}
}

// CodeOf reads a coded error of any type, and calls every other error
// unavailable; only nil has no code.
func TestCodeOf(t *testing.T) {
	for err, want := range map[error]errcode.Code{
		nil:                                    "",
		errors.New("plain"):                    errcode.CodeUnavailable,
		coded{}:                                errcode.CodeHeld,
		fmt.Errorf("ctx: %w", coded{}):         errcode.CodeHeld,
		errcode.Wrap(coded{}, "claim %s", "c"): errcode.CodeHeld,
	} {
		if got := errcode.CodeOf(err); got != want {
			t.Errorf("CodeOf(%v) = %q, want %q", err, got, want)
		}
	}
}
