package bus

import (
	"net/http"
	"reflect"
	"testing"
)

func TestValidName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"orders", true},
		{"orders.get", true},
		{"a-b_c.D9", true},
		{"", false},
		{"orders.*", false},
		{"orders.>", false},
		{"orders get", false},
		{".orders", false},
		{"orders.", false},
		{"orders..get", false},
		{"orders\tget", false},
		{"ordérs", false},
		{string(make([]byte, MaxNameLen+1)), false},
	} {
		if err := ValidName(tc.name); (err == nil) != tc.ok {
			t.Errorf("ValidName(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

func TestCleanHeaders(t *testing.T) {
	h := http.Header{
		"Connection":        {"keep-alive, X-Secret-Hop"},
		"X-Secret-Hop":      {"1"},
		"Keep-Alive":        {"timeout=5"},
		"Transfer-Encoding": {"chunked"},
		"Upgrade":           {"websocket"},
		"Te":                {"trailers"},
		"Jetway-Status":     {"200"},
		"Jetway-App":        {"forged"},
		"Accept":            {"application/json"},
		"X-Custom":          {"a", "b"},
	}
	CleanHeaders(h)
	want := http.Header{"Accept": {"application/json"}, "X-Custom": {"a", "b"}}
	if !reflect.DeepEqual(h, want) {
		t.Fatalf("CleanHeaders left %v, want %v", h, want)
	}
}

func TestCodeStatus(t *testing.T) {
	for code, status := range map[Code]int{
		CodeRouteNotFound: 404, CodeNoWorkers: 503, CodeOverloaded: 503,
		CodeGatewayTimeout: 504, CodePayloadTooLarge: 413, Code("NOPE"): 500,
	} {
		if got := code.Status(); got != status {
			t.Errorf("%s.Status() = %d, want %d", code, got, status)
		}
	}
	if got := string(ErrorJSON(CodeNoWorkers, `say "hi"`, "r1")); got != `{"code":"NO_WORKERS","message":"say \"hi\"","request_id":"r1"}`+"\n" {
		t.Errorf("ErrorJSON = %s", got)
	}
}

func TestInboxPrefix(t *testing.T) {
	for _, tc := range []struct {
		role  string
		pools []string
		want  string
	}{
		{UserEdge, nil, "_INBOX_edge"},
		{UserWorker, nil, "_INBOX_worker"},
		{UserWorker, []string{"orders"}, "_INBOX_worker.orders"},
		{UserWorker, []string{"eu.west", "b", "b"}, "_INBOX_worker.b+eu:west"},
		{UserAdmin, []string{"x"}, ""},
	} {
		if got := InboxPrefix(tc.role, tc.pools...); got != tc.want {
			t.Errorf("InboxPrefix(%s, %v) = %q, want %q", tc.role, tc.pools, got, tc.want)
		}
	}
}
