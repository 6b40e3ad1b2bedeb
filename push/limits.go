package push

import (
	"fmt"
	"sync"
	"time"
)

// Commands: every frame a connection's client sends (WebSocket and TCP —
// an ack, a group's ack or nack, a fresh token, a pong, a WebSocket ping
// or pong, a frame of a type the edge ignores) takes a token from the
// connection's bucket: CommandsPerSecond tokens a second, up to
// CommandBurst. Each message written to the connection (and each ping
// the edge sends) earns the client one more, up to maxEarned, so that a
// client that acks every message it gets — as the protocol allows — is
// never held to the rate however fast its messages come. A client with
// no token left is closed with 1008 (policy) and counted under
// jetway_push_disconnects_total{reason="too_many_commands"}.

// Command rate defaults.
const (
	DefaultCommandsPerSecond = 50
	// maxEarned bounds the commands a connection's deliveries have earned
	// and it has not spent: a client that never acks cannot save up a
	// flood.
	maxEarned = 1024
)

// cmdBucket is a connection's token bucket of commands; the reader of the
// client's frames takes from it (the WebSocket library's ping and pong
// callbacks too, which run in that reader, and its close handshake, which
// may not: hence the lock, never contended).
type cmdBucket struct {
	mu     sync.Mutex
	tokens float64
	at     time.Time
}

// tooManyCommands is the reason a connection over its command rate is
// closed with.
func (s *Server) tooManyCommands() string {
	return fmt.Sprintf("too many commands: at most %d a second (bursts of %d) beside one per message received",
		s.o.CommandsPerSecond, s.o.CommandBurst)
}

// command takes one command of the session's client from its bucket; an
// error (over the rate) is the close's reason.
func (ss *Session) command() error {
	rate := ss.s.o.CommandsPerSecond
	if rate < 0 {
		return nil
	}
	b := &ss.cmds
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	burst := float64(ss.s.o.CommandBurst)
	// Time refills up to the burst (what deliveries earned above it
	// stays); deliveries add on top, up to maxEarned more.
	if refill := b.tokens + now.Sub(b.at).Seconds()*float64(rate); refill > b.tokens {
		b.tokens = max(b.tokens, min(refill, burst))
	}
	b.tokens = min(b.tokens+float64(ss.sb.earned.Swap(0)), burst+maxEarned)
	b.at = now
	if b.tokens < 1 {
		return &commandsError{ss.s.tooManyCommands()}
	}
	b.tokens--
	return nil
}

// control takes the command of a WebSocket ping or pong (the library
// answers a ping itself): past the rate it is not answered — false — and
// the connection is asked to close with 1008.
func (ss *Session) control() bool {
	if err := ss.command(); err != nil {
		ss.sb.endAs(endTooManyCommands, err.Error())
		return false
	}
	return true
}

// commandsError is a client over its command rate.
type commandsError struct{ reason string }

func (e *commandsError) Error() string { return e.reason }

// Why connections end, counted by jetway_push_disconnects_total (SSE,
// WebSocket and TCP connections; pulls are requests, not counted). The
// first cause noted wins: a connection the edge revokes is "revoked"
// though its client is gone by the time it is closed.
type endKind int32

const (
	endNone            endKind = iota
	endClientGone              // the client closed, or a write to it failed
	endRevoked                 // a registry change: app disabled, key revoked, grant, topic or token issuer gone
	endExpired                 // its token expired
	endShutdown                // the edge is shutting down
	endWriteTimeout            // a write blocked past the write timeout
	endPingTimeout             // no answer to a ping within the write timeout
	endFrameError              // a frame over 64 KiB, not UTF-8, not a JSON object; a failed upgrade
	endBadCommand              // a bad ack, nack or token (1008)
	endTooManyCommands         // over the command rate (1008)
	endKicked                  // an operator's kick
	endError                   // the stream or the bus failed under it
	nEndKinds
)

// endNames are the reasons' label values.
var endNames = [nEndKinds]string{
	endNone: "", endClientGone: "client_gone", endRevoked: "revoked", endExpired: "expired", endShutdown: "shutdown",
	endWriteTimeout: "write_timeout", endPingTimeout: "ping_timeout", endFrameError: "frame_error", endBadCommand: "bad_command",
	endTooManyCommands: "too_many_commands", endKicked: "kicked", endError: "error",
}

// ended notes why the subscriber's connection ends, unless a cause is
// noted already.
func (sb *sub) ended(k endKind) { sb.endKind.CompareAndSwap(0, int32(k)) }

// endAs notes why and asks the connection to close.
func (sb *sub) endAs(k endKind, reason string) {
	sb.ended(k)
	sb.end(reason)
}

// countEnd counts a connection's end by its cause (none noted: an error).
func (s *Server) countEnd(sb *sub) {
	if sb.transport == "pull" {
		return
	}
	k := endKind(sb.endKind.Load())
	if k <= endNone || k >= nEndKinds {
		k = endError
	}
	s.stats.disconnects[k].Add(1)
}

// endOfCode is the cause of a close the edge makes for a client's frame.
func endOfCode(code int, err error) endKind {
	switch {
	case code == CodeTooLarge, code == CodeInvalid:
		return endFrameError
	case isCommandsError(err):
		return endTooManyCommands
	}
	return endBadCommand
}

func isCommandsError(err error) bool {
	_, ok := err.(*commandsError)
	return ok
}
