package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) lines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Split(strings.TrimSpace(s.b.String()), "\n")
}

// A flood of server errors (one per garbage connection) is written as
// JSON records through the logger, 10 a minute, then one record with the
// count of the rest; the next minute starts afresh.
func TestErrorLogIsRateLimitedJSON(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf syncBuf
		el := ErrorLog(slog.New(slog.NewJSONHandler(&buf, nil)), "api")
		for i := range 100 {
			el.Printf("http: TLS handshake error from 127.0.0.1:%d: EOF", 40000+i)
		}
		time.Sleep(errorLogWindow)
		synctest.Wait()
		el.Printf("http: TLS handshake error from 127.0.0.1:1: EOF")
		lines := buf.lines()
		if len(lines) != errorLogBurst+2 {
			t.Fatalf("%d lines, want %d:\n%s", len(lines), errorLogBurst+2, strings.Join(lines, "\n"))
		}
		for i, l := range lines {
			var rec map[string]any
			if err := json.Unmarshal([]byte(l), &rec); err != nil {
				t.Fatalf("line %d is not JSON: %q", i, l)
			}
			switch {
			case i == errorLogBurst:
				if rec["msg"] != "api errors suppressed" || fmt.Sprint(rec["suppressed"]) != "90" {
					t.Errorf("line %d: %v, want the count of 90 suppressed", i, rec)
				}
			case rec["level"] != "WARN" || !strings.Contains(fmt.Sprint(rec["err"]), "TLS handshake error"):
				t.Errorf("line %d: %v", i, rec)
			}
		}
	})
}
