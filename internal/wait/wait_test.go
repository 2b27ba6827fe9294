package wait

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

func TestDelay(t *testing.T) {
	b := Backoff{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond}
	for i, want := range []time.Duration{10, 20, 40, 50, 50} {
		if got := b.Delay(i); got != want*time.Millisecond {
			t.Errorf("Delay(%d) = %v, want %v", i, got, want*time.Millisecond)
		}
	}
	if got := (Backoff{Min: time.Second}).Delay(1000); got <= 0 {
		t.Errorf("uncapped Delay overflowed: %v", got)
	}
	j := Backoff{Min: 100 * time.Millisecond, Jitter: true}
	for range 100 {
		if d := j.Delay(0); d < 75*time.Millisecond || d > 125*time.Millisecond {
			t.Fatalf("jittered Delay(0) = %v, want within ±25%% of 100ms", d)
		}
	}
}

func TestSleepEndsWithItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		start := time.Now()
		if err := Sleep(ctx, time.Hour); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Sleep = %v, want the context's error", err)
		}
		if d := time.Since(start); d != time.Second {
			t.Fatalf("Sleep returned after %v, want 1s", d)
		}
		if err := Sleep(t.Context(), time.Minute); err != nil {
			t.Fatal(err)
		}
	})
}

func TestRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		errTransient, errFinal := errors.New("transient"), errors.New("final")
		final := func(err error) bool { return errors.Is(err, errFinal) }
		b := Backoff{Min: time.Second}

		tries := 0
		start := time.Now()
		err := Retry(t.Context(), 3, b, final, func(context.Context) error { tries++; return errTransient })
		if !errors.Is(err, errTransient) || tries != 3 {
			t.Fatalf("Retry = %v after %d tries, want the op's error after 3", err, tries)
		}
		if d := time.Since(start); d != 3*time.Second { // 1s + 2s; no pause after the last try
			t.Fatalf("Retry paused %v, want 3s", d)
		}

		tries = 0
		err = Retry(t.Context(), 0, b, final, func(context.Context) error {
			tries++
			if tries == 2 {
				return errFinal
			}
			return errTransient
		})
		if !errors.Is(err, errFinal) || tries != 2 {
			t.Fatalf("Retry = %v after %d tries, want the final error after 2", err, tries)
		}

		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		err = Retry(ctx, 0, b, nil, func(context.Context) error { return errTransient })
		if !errors.Is(err, errTransient) {
			t.Fatalf("Retry until the context ends = %v, want the op's last error", err)
		}
	})
}
