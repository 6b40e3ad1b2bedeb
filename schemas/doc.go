// Package schemas ships the JSON Schemas of Jetway's registry entries and
// validates documents against them. The schema files are the contract: the
// same files serve editors and other tools (see api.schema.json).
//
// The files are api.schema.json (API entries) and degrade.schema.json
// (degrade switches), embedded in the binary. ValidateAPI and
// ValidateDegrade check a document and return every Problem with its
// field path; package registry calls them when it parses an entry, next
// to the checks a schema cannot express.
package schemas
