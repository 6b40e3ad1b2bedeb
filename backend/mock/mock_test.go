package mock

import (
	"context"
	"testing"

	"github.com/jetway-gw/jetway/backend"
	"github.com/jetway-gw/jetway/registry"
)

func TestMockAnswersTheEntry(t *testing.T) {
	body := "hello"
	inst, err := Adapter{}.Build(&registry.Backend{Type: registry.BackendMock, Static: registry.Static{Status: 201, Headers: map[string]string{"x-a": "1"}, Body: &body}}, backend.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = inst.Close() }()
	resp, err := inst.Call(context.Background(), &backend.Request{Method: "GET"})
	if err != nil || resp.Status != 201 || resp.Header.Get("X-A") != "1" || string(resp.Body) != "hello" {
		t.Fatalf("mock answered %+v, %v", resp, err)
	}
}
