package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jetway-gw/jetway/registry"
)

// .proto files compile with their imports (a file of the project's and a
// well-known type) into a set the registry takes, with the method in it.
func TestReadSchemaFilesCompilesProto(t *testing.T) {
	dir := t.TempDir()
	write := protoWriter(t, dir)
	write("shop/v1/common.proto", `syntax = "proto3"; package shop.v1; message Money { int64 cents = 1; string currency = 2; }`)
	main := write("shop/v1/orders.proto", `syntax = "proto3"; package shop.v1;
import "google/protobuf/timestamp.proto";
import "shop/v1/common.proto";
message GetOrderRequest { string id = 1; }
message Order { string id = 1; Money total = 2; google.protobuf.Timestamp created = 3; }
service Orders { rpc GetOrder(GetOrderRequest) returns (Order); }`)
	set, err := readSchemaFiles([]string{main}, protoPaths{dir})
	if err != nil {
		t.Fatal(err)
	}
	s, _, err := registry.ParseSchema(set)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.FindMethod("shop.v1.Orders/GetOrder"); err != nil {
		t.Fatal(err)
	}
	// Compiling is deterministic: the same files, the same digest.
	set2, _ := readSchemaFiles([]string{main}, protoPaths{dir})
	if s2, _, _ := registry.ParseSchema(set2); s2.Digest != s.Digest {
		t.Fatalf("digests %s and %s of the same files", s.Digest, s2.Digest)
	}
	// An import that is nowhere: a compile error naming it.
	bad := write("bad.proto", `syntax = "proto3"; import "nowhere/x.proto";`)
	if _, err := readSchemaFiles([]string{bad}, nil); err == nil || !strings.Contains(err.Error(), "nowhere/x.proto") {
		t.Fatalf("a missing import: %v", err)
	}
	if _, err := readSchemaFiles([]string{filepath.Join(dir, "x.txt")}, nil); err == nil {
		t.Fatal("a .txt file was taken")
	}
}

// Files of several folders: a folder inside another is not a proto path
// of its own (the order of the files does not matter), and two files with
// one import name are refused rather than one silently dropped.
func TestReadSchemaFilesFolders(t *testing.T) {
	dir := t.TempDir()
	write := protoWriter(t, dir)
	a := write("p/a.proto", `syntax = "proto3"; package a; import "sub/b.proto"; message A { sub.X x = 1; } service SA { rpc M(A) returns (A); }`)
	b := write("p/sub/b.proto", `syntax = "proto3"; package sub; message X {}`)
	for _, order := range [][]string{{a, b}, {b, a}} {
		if _, err := readSchemaFiles(order, nil); err != nil {
			t.Errorf("files %v: %v", order, err)
		}
	}
	c1 := write("x/common.proto", `syntax = "proto3"; package x; message C {}`)
	c2 := write("y/common.proto", `syntax = "proto3"; package y; message C {}`)
	if _, err := readSchemaFiles([]string{c1, c2}, nil); err == nil || !strings.Contains(err.Error(), "two files are common.proto") {
		t.Fatalf("two files of one import name: %v", err)
	}
}

// protoWriter writes test files below dir and returns their paths.
func protoWriter(t *testing.T, dir string) func(name, text string) string {
	return func(name, text string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
}
