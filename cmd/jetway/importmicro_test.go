package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/registry"
)

// import-micro takes the endpoints of the service it asked for only: a
// responder answering as another service names no APIs; a long
// description of the service's own does not block the import.
func TestImportMicroTrustsOnlyTheServiceAsked(t *testing.T) {
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := registry.NewClient(ctx, nc, registry.BucketOptions{})
	if err != nil {
		t.Fatal(err)
	}
	answer := func(subject string, info micro.Info) {
		b, _ := json.Marshal(info)
		if _, err := nc.Subscribe(subject, func(m *nats.Msg) { _ = m.Respond(b) }); err != nil {
			t.Fatal(err)
		}
	}
	ep := []micro.EndpointInfo{{Name: "refund", Subject: "svc.payments.refund"}}
	answer("$SRV.INFO.weather", micro.Info{ServiceIdentity: micro.ServiceIdentity{Name: "payments", Version: "1.0.0"}, Type: micro.InfoResponseType, Endpoints: ep})
	answer("$SRV.INFO.payments", micro.Info{ServiceIdentity: micro.ServiceIdentity{Name: "payments", Version: "1.0.0"}, Type: micro.InfoResponseType,
		Description: strings.Repeat("d", 600<<10), Endpoints: ep})
	nc.Flush()

	var out, errb bytes.Buffer
	if err := importMicro(ctx, nc, c, "weather", importOptions{}, &out, &errb); err == nil || !strings.Contains(err.Error(), `named "payments", not "weather"`) {
		t.Fatalf("an answer as another service: %v\n%s%s", err, out.String(), errb.String())
	}
	if list, _ := c.ListInForce(ctx); len(list) != 0 {
		t.Fatalf("something was imported: %v", list)
	}
	out.Reset()
	if err := importMicro(ctx, nc, c, "payments", importOptions{}, &out, &errb); err != nil || !strings.Contains(out.String(), "wrote draft.payments.refund") {
		t.Fatalf("a service with a long description: %v\n%s%s", err, out.String(), errb.String())
	}
}
