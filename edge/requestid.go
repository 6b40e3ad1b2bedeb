package edge

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync/atomic"
)

// Request ids are a per-process random prefix plus a counter: unique across
// nodes without a syscall or allocation-heavy UUID per request.
var (
	idPrefix  = newIDPrefix()
	idCounter atomic.Uint64
)

func newIDPrefix() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:]) + "-"
}

func newRequestID() string {
	var buf [40]byte
	b := append(buf[:0], idPrefix...)
	b = strconv.AppendUint(b, idCounter.Add(1), 36)
	return string(b)
}

// validRequestID accepts a caller's X-Request-Id if it is short and made of
// safe characters (it ends up in logs, headers and backends).
func validRequestID(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':') {
			return false
		}
	}
	return true
}
