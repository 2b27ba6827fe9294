package main

import (
	"encoding/json"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Garbage sent to a --tls-cert daemon's port (plain HTTP, then bytes that
// are no TLS record), 40 connections of it: with --log-format json every
// line the daemon writes about it is a JSON record, and at most 10 are
// written in the minute (they were one plain "http: TLS handshake error"
// line on stderr per connection, whatever the log format).
func TestE2ETLSHandshakeErrorsGoThroughTheLogger(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	selfSigned(t, certFile, keyFile, "one")
	p := startDeed(t, nil, "run", "--log-format", "json", "--data-dir", filepath.Join(dir, "data"), "--listen", anyPort, "--s3-listen", anyPort,
		"--tls-cert", certFile, "--tls-key", keyFile, "--token", "t0ken")
	api := strings.TrimPrefix(reported(t, p, runBanner, bannerWaitLimit), "https://")
	for i := range 40 {
		c, err := net.Dial("tcp", api)
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			_, _ = c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
		} else {
			_, _ = c.Write([]byte("\x16\x03\x01\x00\x05garbage"))
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		var b [512]byte
		_, _ = c.Read(b[:])
		c.Close()
	}
	var handshake []string
	deadline := time.Now().Add(10 * time.Second)
	for {
		handshake = handshake[:0]
		for l := range strings.SplitSeq(p.out.String(), "\n") {
			if strings.Contains(l, "handshake") {
				handshake = append(handshake, l)
			}
		}
		if len(handshake) >= 10 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // any line beyond the limit would be written by now
	handshake = handshake[:0]
	for l := range strings.SplitSeq(p.out.String(), "\n") {
		if strings.Contains(l, "handshake") {
			handshake = append(handshake, l)
		}
	}
	if len(handshake) == 0 || len(handshake) > 10 {
		t.Errorf("%d lines about failed handshakes for 40 connections, want 1 to 10", len(handshake))
	}
	for _, l := range handshake {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil || rec["level"] != "WARN" {
			t.Errorf("not a JSON WARN record: %q", l)
		}
	}
}
