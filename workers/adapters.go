package workers

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/backend"
	grpcbackend "github.com/jetway-gw/jetway/backend/grpc"
	httpbackend "github.com/jetway-gw/jetway/backend/http"
	"github.com/jetway-gw/jetway/backend/mock"
	natsbackend "github.com/jetway-gw/jetway/backend/nats"
	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/registry"
)

// adapters maps each backend type to its adapter. Each worker makes its
// own: the HTTP adapter's client, shared by the worker's APIs, is bounded
// by the worker's max payload. A new backend type is one folder in
// backend/, one line here and one in the registry's table of kinds.
func adapters(nc *nats.Conn, maxResp int) map[string]backend.Adapter {
	return map[string]backend.Adapter{
		registry.BackendHTTP: httpbackend.New(maxResp),
		registry.BackendMock: mock.Adapter{},
		registry.BackendNATS: natsbackend.New(nc, maxResp, func(ctx context.Context, pool, name string) ([]byte, uint64, error) {
			if nc == nil {
				return nil, 0, fmt.Errorf("no NATS connection to read secret %s", name)
			}
			return registry.LoadSecret(ctx, nc, pool, name)
		}),
		registry.BackendGRPC: grpcbackend.New(maxResp, (&schemaStore{nc: nc}).load),
	}
}

// schemaStore reads the gRPC schemas entries pin from jetway_schemas. The
// bucket is opened on the first read (a worker without grpc backends
// never touches it) and again after a failure.
type schemaStore struct {
	nc *nats.Conn
	mu sync.Mutex
	kv jetstream.KeyValue
	// loaded keeps the schemas read, by digest (a digest's content never
	// changes), so APIs pinning one schema, and their rebuilds, read and
	// parse it once; bounded, the oldest read is forgotten first.
	loaded map[string]*registry.Schema
	order  []string
}

// maxLoadedSchemas bounds schemaStore.loaded.
const maxLoadedSchemas = 32

func (s *schemaStore) load(ctx context.Context, digest string) (*registry.Schema, error) {
	s.mu.Lock()
	kv, sc := s.kv, s.loaded[digest]
	s.mu.Unlock()
	if sc != nil {
		return sc, nil
	}
	if kv == nil {
		if s.nc == nil {
			return nil, fmt.Errorf("no NATS connection to read schema %s", digest)
		}
		js, err := jetstream.New(s.nc)
		if err != nil {
			return nil, err
		}
		if kv, err = js.KeyValue(ctx, registry.BucketSchemas); err != nil {
			return nil, fmt.Errorf("opening %s: %w", registry.BucketSchemas, err)
		}
		s.mu.Lock()
		s.kv = kv
		s.mu.Unlock()
	}
	sc, err := registry.LoadSchema(ctx, kv, digest)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.loaded == nil {
		s.loaded = map[string]*registry.Schema{}
	}
	if _, ok := s.loaded[digest]; !ok {
		if len(s.order) == maxLoadedSchemas {
			delete(s.loaded, s.order[0])
			s.order = s.order[1:]
		}
		s.loaded[digest] = sc
		s.order = append(s.order, digest)
	}
	return sc, nil
}

// held is an API's backend instance as the worker holds it: built when the
// entry's backend spec is published or changed and kept while it is
// unchanged (governance.instance), then retired when a new spec replaces
// it or the API leaves the worker. A retired instance is closed as soon as
// no call on it is in flight: every call acquires it first (apiSub.acquire)
// and releases it when its reply is sent, so Close never races a Call.
type held struct {
	inst backend.Instance // nil when Build failed
	call backend.Backend  // inst.Call, or the Build error for every call
	log  *slog.Logger

	calls   atomic.Int64
	retired atomic.Bool
	closed  atomic.Bool
}

// hold builds the instance serving a's backend through its type's adapter.
// When the build fails, the API's calls get BAD_GATEWAY until the next
// registry change builds it again.
func (w *Worker) hold(a *registry.API) *held {
	h := &held{log: w.log}
	ad := w.adapters[a.Backend.Type]
	if ad == nil { // the registry admits no such type; a newer node may
		h.call = failed(fmt.Sprintf("backend type %q of api %s is not supported by this worker", a.Backend.Type, a.Key()))
		return h
	}
	inst, err := ad.Build(&a.Backend, backend.BuildOptions{Logger: w.log, Tracer: w.clientTracer, Pool: a.Pool})
	if err != nil {
		w.log.Error("building backend", "api", a.Key(), "type", a.Backend.Type, "err", err)
		h.call = failed(fmt.Sprintf("backend of api %s could not be set up", a.Key()))
		return h
	}
	h.inst, h.call = inst, inst.Call
	return h
}

func failed(msg string) backend.Backend {
	err := bus.Errorf(bus.CodeBadGateway, msg)
	return func(context.Context, *backend.Request) (*backend.Response, error) { return nil, err }
}

// acquire counts a call on the instance; false when it is retired (the
// caller then looks for the instance that replaced it).
func (h *held) acquire() bool {
	h.calls.Add(1)
	if h.retired.Load() {
		h.release()
		return false
	}
	return true
}

// release ends a call counted by acquire; the last call on a retired
// instance closes it.
func (h *held) release() {
	if h.calls.Add(-1) == 0 && h.retired.Load() {
		h.close()
	}
}

// retire stops new calls on the instance and closes it once none is in
// flight. Retired is set before the count is read, and acquire counts
// before it reads retired: either retire sees the call, or the call sees
// retired.
func (h *held) retire() {
	if h == nil {
		return
	}
	h.retired.Store(true)
	if h.calls.Load() == 0 {
		h.close()
	}
}

func (h *held) close() {
	if !h.closed.CompareAndSwap(false, true) || h.inst == nil {
		return
	}
	if err := h.inst.Close(); err != nil {
		h.log.Warn("closing backend", "err", err)
	}
}
