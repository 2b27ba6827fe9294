// Package nonce makes the random names deed writes: nonces in records,
// node incarnations, scratch prefixes. Internal to deed.
package nonce

import (
	"crypto/rand"
	"encoding/hex"
)

// Hex returns n random bytes from crypto/rand as 2n lower-case hex digits.
func Hex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b)
}
