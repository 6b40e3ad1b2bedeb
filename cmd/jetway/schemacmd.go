package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

const schemaUsage = `Usage: jetway schema <command> [flags] [args]

Commands:
  put FILE...     compile .proto files (imports found under --proto-path, default
                  each file's folder; google/protobuf/*.proto built in) or read
                  one FileDescriptorSet (.pb/.binpb: protoc --include_imports -o,
                  buf build -o), store it in the registry, and print its digest
  list            the stored schemas: digest, size, services

A grpc backend pins a stored schema with "schema": "sha256:<hex>" and then
never asks the server's reflection: every worker uses exactly that schema,
and the API's history shows when it changed. Schemas are content addressed
(bucket jetway_schemas; the admin writes, workers read); putting the same
one again changes nothing. api put refuses an entry whose schema is not
stored or lacks its method.

Flags:
`

// protoPaths is --proto-path, repeatable.
type protoPaths []string

func (p *protoPaths) String() string     { return strings.Join(*p, ",") }
func (p *protoPaths) Set(v string) error { *p = append(*p, v); return nil }

func cmdSchema(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("jetway schema", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rf := addRegistryFlags(fs)
	replicas := fs.Int("replicas", 1, "replicas of the registry buckets if they have to be created")
	var paths protoPaths
	fs.Var(&paths, "proto-path", "put: a folder imports are found under (repeatable; default each file's folder)")
	fs.Usage = func() { groupUsage(stderr, fs, "schema", schemaUsage, args) }
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 && pos[0] == "put" {
		// put takes any number of files: check the command alone.
		if err := checkSubcommand(fs, "schema", pos[:2], map[string]int{"put": 1, "list": 0}); err != nil {
			return err
		}
	} else if err := checkSubcommand(fs, "schema", pos, map[string]int{"put": 1, "list": 0}); err != nil {
		return err
	}
	var set []byte
	if pos[0] == "put" {
		if set, err = readSchemaFiles(pos[1:], paths); err != nil {
			return err
		}
	}
	ctx, c, done, err := rf.dial(*replicas)
	if err != nil {
		return err
	}
	defer done()
	switch pos[0] {
	case "put":
		s, err := c.PutSchema(ctx, set)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "stored schema %s (%d bytes; services %s)\n", s.Digest, s.Size, strings.Join(s.Services(), ", "))
		fmt.Fprintf(stdout, "pin it in a grpc backend: \"schema\": %q\n", s.Digest)
	case "list":
		ss, err := c.ListSchemas(ctx)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "DIGEST\tBYTES\tSERVICES")
		for _, s := range ss {
			if s.Err != nil {
				fmt.Fprintf(tw, "%s\t-\tinvalid: %v\n", s.Digest, s.Err)
				continue
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\n", s.Digest, s.Size, strings.Join(s.Services(), ","))
		}
		return tw.Flush()
	}
	return nil
}

// readSchemaFiles turns the files of schema put into one FileDescriptorSet:
// a single .pb/.binpb as it is, or .proto files compiled with their
// imports.
func readSchemaFiles(files []string, paths protoPaths) ([]byte, error) {
	if len(files) == 1 && (strings.HasSuffix(files[0], ".pb") || strings.HasSuffix(files[0], ".binpb")) {
		b, err := os.ReadFile(files[0])
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errUsage, err)
		}
		return b, nil
	}
	if len(paths) == 0 {
		paths = defaultProtoPaths(files)
	}
	var rel []string
	for _, f := range files {
		if !strings.HasSuffix(f, ".proto") {
			return nil, fmt.Errorf("%w: %s is neither a .proto file nor one .pb FileDescriptorSet", errUsage, f)
		}
		r, err := relativeTo(f, paths)
		if err != nil {
			return nil, err
		}
		if slices.Contains(rel, r) {
			return nil, fmt.Errorf("%w: two files are %s below the proto paths (%s); give --proto-path so that each has its own import name", errUsage, r, strings.Join(paths, ", "))
		}
		rel = append(rel, r)
	}
	comp := protocompile.Compiler{Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{ImportPaths: paths})}
	compiled, err := comp.Compile(context.Background(), rel...)
	if err != nil {
		return nil, fmt.Errorf("compiling: %v", err)
	}
	set := &descriptorpb.FileDescriptorSet{}
	seen := map[string]bool{}
	var add func(f protoreflect.FileDescriptor)
	add = func(f protoreflect.FileDescriptor) { // dependencies first
		if seen[f.Path()] {
			return
		}
		seen[f.Path()] = true
		for i := 0; i < f.Imports().Len(); i++ {
			add(f.Imports().Get(i).FileDescriptor)
		}
		set.File = append(set.File, protodesc.ToFileDescriptorProto(f))
	}
	for _, f := range compiled {
		add(f)
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(set)
}

// defaultProtoPaths are the files' folders, less those inside another of
// them: a file in p/sub is then sub/x.proto, as a file in p imports it.
func defaultProtoPaths(files []string) protoPaths {
	var dirs []string
	for _, f := range files {
		d, err := filepath.Abs(filepath.Dir(f))
		if err == nil && !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	var out protoPaths
	for _, d := range dirs {
		inside := false
		for _, o := range dirs {
			if r, err := filepath.Rel(o, d); o != d && err == nil && !strings.HasPrefix(r, "..") {
				inside = true
			}
		}
		if !inside {
			out = append(out, d)
		}
	}
	return out
}

// relativeTo is f's path below the first of paths that holds it.
func relativeTo(f string, paths protoPaths) (string, error) {
	abs, err := filepath.Abs(f)
	if err != nil {
		return "", err
	}
	for _, p := range paths {
		ap, err := filepath.Abs(p)
		if err != nil {
			continue
		}
		if r, err := filepath.Rel(ap, abs); err == nil && !strings.HasPrefix(r, "..") {
			return filepath.ToSlash(r), nil
		}
	}
	return "", fmt.Errorf("%w: %s is under no --proto-path", errUsage, f)
}
