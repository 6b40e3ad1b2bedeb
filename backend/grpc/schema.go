package grpcbackend

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jhump/protoreflect/v2/grpcreflect"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/jetway-gw/jetway/registry"
)

// How the schema of a method is kept: read by server reflection on the
// first call; read again in the background by the first call that finds it
// older than refreshEvery, or older than refreshMin once something said it
// may have changed (invalidate: the backend answered UNIMPLEMENTED, a
// request named a field it lacks, a response carried fields it lacks); kept
// when a refresh fails. A failed first read is not tried again for
// retryAfter, so a backend without reflection costs one read a second, not
// one per call.
const (
	fetchTimeout = 5 * time.Second
	retryAfter   = time.Second
)

// refreshEvery is the age at which a schema at hand is read again, whatever
// the calls say. A variable for the tests only.
var refreshEvery = 5 * time.Minute

// refreshMin is the least time between two reads of a schema at hand,
// however often calls say it may have changed: callers' bodies with
// unknown fields, or a server whose answers always carry fields its
// reflection does not declare, cannot keep the backend's reflection busy.
// A variable for the tests only.
var refreshMin = 10 * time.Second

// method is one resolved schema: what a call needs to write its request
// and read its answer. It is immutable and shared by every call.
type method struct {
	desc  protoreflect.MethodDescriptor
	path  string // "/package.Service/Method"
	types *protoregistry.Types
	at    time.Time
}

// SchemaLoader reads a schema stored in the registry by its digest
// (registry.LoadSchema over the worker's connection).
type SchemaLoader func(ctx context.Context, digest string) (*registry.Schema, error)

// schema reads and keeps the method's descriptors: by reflection, or from
// the registry when the entry pins a digest (then read once: a digest's
// content never changes). Calls read cur without a lock; mu guards only
// the start of a read.
type schema struct {
	cc      grpc.ClientConnInterface
	service protoreflect.FullName
	name    protoreflect.Name
	digest  string // pinned schema; "" for reflection
	load    SchemaLoader

	cur   atomic.Pointer[method]
	stale atomic.Bool

	mu       sync.Mutex
	inflight chan struct{} // closed when the read in progress ends; nil: none
	lastErr  error         // of the last read, while cur is nil
	lastAt   time.Time
	closed   bool
}

func newSchema(cc grpc.ClientConnInterface, fullMethod, digest string, load SchemaLoader) *schema {
	svc, name, _ := strings.Cut(fullMethod, "/") // validated at publish
	return &schema{cc: cc, service: protoreflect.FullName(svc), name: protoreflect.Name(name), digest: digest, load: load}
}

// errNoMethod is a method the backend's reflection does not know.
type errNoMethod struct{ msg string }

func (e *errNoMethod) Error() string { return e.msg }

// get returns the method's schema. With one at hand it returns it at once
// (starting a refresh in the background when it is due); without one it
// waits for a read, at most until ctx ends.
func (s *schema) get(ctx context.Context) (*method, error) {
	m := s.cur.Load()
	if m != nil && s.digest != "" {
		return m, nil // pinned: never refreshed
	}
	if m != nil {
		if age := time.Since(m.at); age > refreshEvery || (age > refreshMin && s.stale.Load()) {
			_, _ = s.start() // a refresh in the background; the schema at hand serves meanwhile
		}
		return m, nil
	}
	done, err := s.start()
	if done == nil {
		if m := s.cur.Load(); m != nil { // read by another call meanwhile
			return m, nil
		}
		return nil, err
	}
	select {
	case <-done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if m := s.cur.Load(); m != nil {
		return m, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return nil, s.lastErr
}

// invalidate marks the schema for a refresh: the backend answered in a way
// that says it may have changed.
func (s *schema) invalidate() { s.stale.Store(true) }

// start begins a read unless one is in progress; it returns the channel
// that closes when that read ends, or nil and the last error while the
// last failed read is too recent to try again.
func (s *schema) start() (<-chan struct{}, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inflight != nil {
		return s.inflight, nil
	}
	if s.closed {
		return nil, errors.New("backend closed")
	}
	if s.cur.Load() == nil && s.lastErr != nil && time.Since(s.lastAt) < retryAfter {
		return nil, s.lastErr
	}
	if s.cur.Load() != nil && time.Since(s.lastAt) < refreshMin {
		return nil, nil // a refresh was tried just now (and failed: cur is older)
	}
	done := make(chan struct{})
	s.inflight = done
	go s.fetch(done)
	return done, nil
}

func (s *schema) fetch(done chan struct{}) {
	m, err := s.read()
	s.mu.Lock()
	s.lastAt = time.Now()
	if err == nil {
		s.cur.Store(m)
		s.stale.Store(false)
		s.lastErr = nil
	} else {
		s.lastErr = err
	}
	s.inflight = nil
	s.mu.Unlock()
	close(done)
}

func (s *schema) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}

// read asks the backend's reflection service (v1, else v1alpha) for the
// file that defines the service, and collects every message type of that
// file and its imports for reading Any fields.
func (s *schema) read() (*method, error) {
	ctx, cancel := context.WithTimeout(context.Background(), fetchTimeout)
	defer cancel()
	if s.digest != "" {
		return s.readPinned(ctx)
	}
	rc := grpcreflect.NewClientAuto(ctx, s.cc)
	defer rc.Reset()
	fd, err := rc.FileContainingSymbol(s.service)
	if err != nil {
		if grpcreflect.IsElementNotFoundError(err) {
			return nil, &errNoMethod{fmt.Sprintf("the backend has no service %s", s.service)}
		}
		return nil, fmt.Errorf("reading the schema of %s by server reflection: %w", s.service, err)
	}
	sd := fd.Services().ByName(s.service.Name())
	if sd == nil {
		return nil, &errNoMethod{fmt.Sprintf("the backend has no service %s", s.service)}
	}
	md := sd.Methods().ByName(s.name)
	if md == nil {
		return nil, &errNoMethod{fmt.Sprintf("service %s has no method %s", s.service, s.name)}
	}
	return &method{desc: md, path: "/" + string(s.service) + "/" + string(s.name), types: typesOf(fd), at: time.Now()}, nil
}

// readPinned reads the entry's schema from the registry.
func (s *schema) readPinned(ctx context.Context) (*method, error) {
	if s.load == nil {
		return nil, errors.New("this worker cannot read schemas from the registry")
	}
	sc, err := s.load(ctx, s.digest)
	if err != nil {
		return nil, err
	}
	fullMethod := string(s.service) + "/" + string(s.name)
	md, err := sc.FindMethod(fullMethod)
	if err != nil {
		return nil, &errNoMethod{err.Error()}
	}
	t := new(protoregistry.Types)
	sc.Files.RangeFiles(func(f protoreflect.FileDescriptor) bool {
		registerFile(t, f)
		return true
	})
	return &method{desc: md, path: "/" + fullMethod, types: t, at: time.Now()}, nil
}

// typesOf registers every message and extension of fd and the files it
// imports, as dynamic types.
func typesOf(fd protoreflect.FileDescriptor) *protoregistry.Types {
	t := new(protoregistry.Types)
	seen := map[string]bool{}
	var file func(f protoreflect.FileDescriptor)
	file = func(f protoreflect.FileDescriptor) {
		if seen[f.Path()] {
			return
		}
		seen[f.Path()] = true
		registerFile(t, f)
		for i := 0; i < f.Imports().Len(); i++ {
			file(f.Imports().Get(i).FileDescriptor)
		}
	}
	file(fd)
	return t
}

// registerFile registers the messages (nested too) and extensions of f.
// A duplicate keeps the first.
func registerFile(t *protoregistry.Types, f protoreflect.FileDescriptor) {
	var messages func(ms protoreflect.MessageDescriptors)
	messages = func(ms protoreflect.MessageDescriptors) {
		for i := 0; i < ms.Len(); i++ {
			m := ms.Get(i)
			_ = t.RegisterMessage(dynamicpb.NewMessageType(m))
			messages(m.Messages())
		}
	}
	messages(f.Messages())
	for i := 0; i < f.Extensions().Len(); i++ {
		_ = t.RegisterExtension(dynamicpb.NewExtensionType(f.Extensions().Get(i)))
	}
}

// resolver finds types for protojson: the method's files first, then the
// types linked into Jetway (google.rpc error details, well-known types).
type resolver struct{ local *protoregistry.Types }

func (r resolver) FindMessageByName(n protoreflect.FullName) (protoreflect.MessageType, error) {
	if r.local != nil {
		if t, err := r.local.FindMessageByName(n); err == nil {
			return t, nil
		}
	}
	return protoregistry.GlobalTypes.FindMessageByName(n)
}

func (r resolver) FindMessageByURL(url string) (protoreflect.MessageType, error) {
	if r.local != nil {
		if t, err := r.local.FindMessageByURL(url); err == nil {
			return t, nil
		}
	}
	return protoregistry.GlobalTypes.FindMessageByURL(url)
}

func (r resolver) FindExtensionByName(n protoreflect.FullName) (protoreflect.ExtensionType, error) {
	if r.local != nil {
		if t, err := r.local.FindExtensionByName(n); err == nil {
			return t, nil
		}
	}
	return protoregistry.GlobalTypes.FindExtensionByName(n)
}

func (r resolver) FindExtensionByNumber(m protoreflect.FullName, f protoreflect.FieldNumber) (protoreflect.ExtensionType, error) {
	if r.local != nil {
		if t, err := r.local.FindExtensionByNumber(m, f); err == nil {
			return t, nil
		}
	}
	return protoregistry.GlobalTypes.FindExtensionByNumber(m, f)
}
