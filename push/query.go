package push

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/jetway-gw/jetway/bus"
)

// Operators' questions to every edge at once (jetway push stats|
// connections|kick --cluster): a request on bus.PushQuerySubject, which
// every edge answers. Only the admin NATS user may ask
// (bus.RolePermissions): a kick ends connections, and the lists name
// devices and users. The admin API asks with it for its operators
// (admin/push.go).

// Query is a question to every edge's push side.
type Query struct {
	// Op is "stats", "connections" or "kick".
	Op string `json:"op"`
	// App narrows connections to one app's, and names the app a kick
	// ends the connections of (required then); Topic narrows a kick.
	App   string `json:"app,omitempty"`
	Topic string `json:"topic,omitempty"`
	// Limit caps the connections an edge lists (0 or over
	// MaxQueryConnections: MaxQueryConnections).
	Limit int `json:"limit,omitempty"`
}

// MaxQueryConnections bounds the connections one edge lists in one answer.
const MaxQueryConnections = 1000

// Answer is one edge's answer to a Query.
type Answer struct {
	Edge        string `json:"edge"`
	Stats       *Stats `json:"stats,omitempty"`
	Connections []Conn `json:"connections,omitempty"`
	// Total is how many connections matched (more than listed when the
	// limit cut the list).
	Total  int    `json:"total,omitempty"`
	Kicked int    `json:"kicked,omitempty"`
	Error  string `json:"error,omitempty"`
}

// maxAnswers bounds the answers one Ask gathers (a flood of forged answers
// to the inbox is cut there).
const maxAnswers = 1024

// Ask puts q to every edge over nc (the admin's: only the admin may ask)
// and returns their answers, one per edge id (the first, when a forged
// answer claims an id again), sorted by edge id; missing are the edges
// heard beating that did not answer before ctx ended.
func Ask(ctx context.Context, nc *nats.Conn, q Query) (answers []Answer, missing []string, err error) {
	b, _ := json.Marshal(q)
	seen := map[string]bool{}
	missing, err = bus.AskEveryNode(ctx, nc, bus.PushQuerySubject, b, []string{"edge", "serve"}, func(b []byte) string {
		var a Answer
		if json.Unmarshal(b, &a) != nil || a.Edge == "" || seen[a.Edge] || len(answers) >= maxAnswers {
			return ""
		}
		seen[a.Edge] = true
		answers = append(answers, a)
		return a.Edge
	})
	slices.SortFunc(answers, func(a, b Answer) int { return strings.Compare(a.Edge, b.Edge) })
	return answers, missing, err
}

// answerQuery answers one operator's question.
func (s *Server) answerQuery(m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	var q Query
	ans := Answer{Edge: s.o.NodeID}
	dec := json.NewDecoder(bytes.NewReader(m.Data))
	dec.DisallowUnknownFields() // a misspelt field must not widen a kick
	switch err := dec.Decode(&q); {
	case err != nil:
		ans.Error = "the query does not parse: " + err.Error()
	case q.App != "" && bus.ValidName(q.App) != nil, q.Topic != "" && bus.ValidName(q.Topic) != nil:
		ans.Error = "the app or topic is not a valid name"
	case q.Op == "stats":
		st := s.Stats()
		ans.Stats = &st
	case q.Op == "connections":
		limit := q.Limit
		if limit <= 0 || limit > MaxQueryConnections {
			limit = MaxQueryConnections
		}
		all := s.Connections(q.App, 0)
		ans.Total = len(all)
		ans.Connections = all[:min(len(all), limit)]
	case q.Op == "kick" && q.App != "":
		ans.Kicked = s.Kick(q.App, q.Topic, "ended by an operator")
	default:
		ans.Error = "unknown op " + q.Op + " (stats, connections, or kick with an app)"
	}
	_ = m.Respond(encodeAnswer(ans, s.nc.MaxPayload()))
}

// encodeAnswer is an answer as JSON within max bytes (the NATS server's
// max_payload: a larger answer would not be sent at all). A list of
// connections too long for it is cut, oldest kept; Total still says how
// many there are.
func encodeAnswer(ans Answer, max int64) []byte {
	for {
		b, _ := json.Marshal(ans)
		if int64(len(b)) <= max || len(ans.Connections) == 0 {
			return b
		}
		ans.Connections = ans.Connections[:len(ans.Connections)/2]
	}
}
