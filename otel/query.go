package otel

import (
	"encoding/json"
	"time"

	"github.com/jetway-gw/jetway/bus"
)

// MetricsQuerySubject is where every edge answers for the per-second
// records it keeps (the same ring as the admin listener's /metric), so a
// command can show an API's recent past before it follows the live
// records.
const MetricsQuerySubject = bus.MetricsQuerySubject

// MetricsQuery asks a node for an API's records of the last Seconds.
type MetricsQuery struct {
	API     string `json:"api"`
	Seconds int    `json:"seconds"`
}

// Bounds of what one query may ask a node for.
const (
	maxQuerySeconds = 3600
	maxQueryRecords = 3600
)

// AnswerQuery answers a MetricsQuery (JSON) with the node's matching records
// (a JSON array of Record, oldest first), at most an hour of one API's.
// A query that does not parse or names no API gets nil: no answer.
func (m *Metrics) AnswerQuery(q []byte, now time.Time) []byte {
	var mq MetricsQuery
	if json.Unmarshal(q, &mq) != nil || mq.API == "" {
		return nil
	}
	secs := min(max(mq.Seconds, 1), maxQuerySeconds)
	rs := m.Records(mq.API, now.Add(-time.Duration(secs)*time.Second), time.Time{}, maxQueryRecords)
	if rs == nil {
		rs = []Record{}
	}
	b, _ := json.Marshal(rs)
	return b
}
