package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/schemas"
)

// BucketFlags holds live switches: key degrade.<api> turns an API's degrade
// switch on or off (schemas/degrade.schema.json).
const BucketFlags = bus.BucketFlags

// DegradePrefix starts the key of an API's degrade switch.
const DegradePrefix = "degrade."

// DegradeKey is the jetway_flags key of an API's degrade switch.
func DegradeKey(api string) string { return DegradePrefix + api }

// Degrade is an API's degrade switch. While On, every edge answers the API
// itself with the switch's response, without touching a worker.
type Degrade struct {
	On     bool   `json:"on"`
	Reason string `json:"reason,omitempty"`
	// Cached answers with the last good response the edge saw for the same
	// method, path and query — kept by edges for APIs whose fallback has
	// "cached": true — and with the switch's own answer when there is none.
	Cached bool `json:"cached,omitempty"`
	Static

	// API is the API the switch belongs to (from its key); Revision the KV
	// revision it was read at. Neither is part of the stored JSON.
	API      string `json:"-"`
	Revision uint64 `json:"-"`
}

// Marshal returns the switch's JSON.
func (d *Degrade) Marshal() []byte {
	b, _ := json.Marshal(d)
	return b
}

// Response returns what callers get while the switch is on: the switch's
// own response, or by default 503 with {"code":"DEGRADED",...} (the
// request id is filled in per request by the caller of DefaultBody).
func (d *Degrade) Response() (status int, h http.Header, body []byte) {
	return d.Static.Compile(http.StatusServiceUnavailable)
}

// Message is the human message of the default DEGRADED answer.
func (d *Degrade) Message() string {
	if d.Reason != "" {
		return "api " + d.API + " is degraded: " + d.Reason
	}
	return "api " + d.API + " is temporarily degraded"
}

// ParseDegrade decodes and validates the value of a jetway_flags key of the
// form degrade.<api>. It returns a *ValidationError listing every problem.
func ParseDegrade(key string, doc []byte) (*Degrade, error) {
	api, js, l := parseFlag(key, DegradePrefix, doc, schemas.ValidateDegrade)
	if js == nil {
		return nil, l.err()
	}
	var d Degrade
	if len(l.ps) == 0 {
		if err := json.Unmarshal(js, &d); err != nil {
			l.add("", "%v", err)
		}
		d.Static.check("", l.add)
	}
	if err := l.err(); err != nil {
		return nil, err
	}
	d.API = api
	return &d, nil
}

// problemList gathers the problems of one entry.
type problemList struct {
	key string
	ps  []schemas.Problem
}

func (l *problemList) add(path, format string, args ...any) {
	l.ps = append(l.ps, schemas.Problem{Path: path, Message: fmt.Sprintf(format, args...)})
}

// err is the *ValidationError of the problems, nil for none.
func (l *problemList) err() error {
	if len(l.ps) == 0 {
		return nil
	}
	return &ValidationError{Key: l.key, Problems: l.ps}
}

// parseFlag starts parsing a jetway_flags value under a key of the form
// <prefix><api>: the API, the value as JSON (nil when it is neither JSON
// nor YAML) and the problems of its key and against its schema.
func parseFlag(key, prefix string, doc []byte, validate func([]byte) []schemas.Problem) (api string, js []byte, l *problemList) {
	l = &problemList{key: key}
	api, ok := strings.CutPrefix(key, prefix)
	if !ok {
		l.add("", "unknown flag key %q (flags are %s<api name> and %s<api name>)", key, DegradePrefix, FaultPrefix)
	} else if err := bus.ValidName(api); err != nil {
		l.add("", "key %q: api name %v", key, err)
	}
	js, err := ToJSON(doc)
	if err != nil {
		l.add("", "%v", err)
		return api, nil, l
	}
	l.ps = append(l.ps, validate(js)...)
	return api, js, l
}

// OpenFlags opens the jetway_flags bucket, creating it when it is missing.
func OpenFlags(ctx context.Context, js jetstream.JetStream, o BucketOptions) (jetstream.KeyValue, error) {
	return openBucket(ctx, js, jetstream.KeyValueConfig{
		Bucket:      BucketFlags,
		Description: "Jetway live switches (degrade.<api>, per schemas/degrade.schema.json)",
		History:     HistoryDepth,
		Replicas:    max(o.Replicas, 1),
	})
}
