package push

import (
	"errors"
	"strconv"
	"strings"
)

// Cursor is a position in the push stream: the stream's epoch (it changes
// when the stream is made anew) and a sequence. Written "EPOCH:SEQ".
type Cursor struct {
	Epoch string
	Seq   uint64
}

func (c Cursor) String() string { return c.Epoch + ":" + strconv.FormatUint(c.Seq, 10) }

// ErrBadCursor is returned for a cursor that is not [EPOCH:]SEQ.
var ErrBadCursor = errors.New("a cursor is [EPOCH:]SEQ: an epoch of digits, a sequence of digits")

// ParseCursor reads "[EPOCH:]SEQ"; without an epoch it is the stream's
// current one.
func ParseCursor(s string) (Cursor, error) {
	epoch, seq, ok := strings.Cut(s, ":")
	if !ok {
		epoch, seq = "", s
	} else if !digits(epoch) {
		return Cursor{}, ErrBadCursor
	}
	if !digits(seq) {
		return Cursor{}, ErrBadCursor
	}
	n, err := strconv.ParseUint(seq, 10, 64)
	if err != nil {
		return Cursor{}, ErrBadCursor
	}
	return Cursor{Epoch: epoch, Seq: n}, nil
}

func digits(s string) bool {
	if s == "" || len(s) > 20 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// Start is where a subscription begins.
type Start struct {
	// After is the last message the client has (Last-Event-ID, after=):
	// delivery goes on with the next. Zero value with From unset: live
	// messages only.
	After *Cursor
	// From is the first sequence the client wants (from=), inclusive.
	From *Cursor
	// Acked starts after the subscriber's stored ack (after=ack), or at
	// the first message the stream keeps when it has none.
	Acked bool
}

// Gap is what a client is told when it cannot get everything it asked
// for: its cursor is older than the retention, of another epoch (the stream
// was made anew) or from the future. Delivery goes on from Resume.
type Gap struct {
	Reason string `json:"reason"` // expired, epoch or future
	Asked  string `json:"asked"`  // the cursor the client gave
	// Resume is the cursor delivery goes on after.
	Resume string `json:"resume"`
}

// Gap reasons.
const (
	GapExpired = "expired"
	GapEpoch   = "epoch"
	GapFuture  = "future"
)
