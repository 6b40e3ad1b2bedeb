// Package sign signs HTTP requests for Jetway APIs that accept the "hmac"
// method, and builds the string both sides sign. Scheme JW1-HMAC-SHA256:
//
//	Authorization: JW1-HMAC-SHA256 app=<app id>,ts=<unix seconds>,nonce=<nonce>,headers=<names>,sig=<signature>
//
// where sig is base64url (no padding) of HMAC-SHA256(secret, S), and S is
// these lines joined by "\n":
//
//	JW1-HMAC-SHA256
//	<METHOD>
//	<path, as sent (escaped)>
//	<query: every name=value pair, each part percent-encoded, sorted, joined by &>
//	<ts>
//	<nonce>
//	<hex SHA-256 of the body (of the empty string when there is none)>
//	<name:value for each signed header, lower-case names in the order of headers=, values trimmed>
//
// nonce is 16 to 64 characters of [A-Za-z0-9_-], never reused: the gateway
// refuses a nonce it has seen in the last 10 minutes on any edge, and a
// timestamp more than 5 minutes away from its clock. headers= lists
// lower-case header names separated by ";" (may be empty).
//
// Sign signs a request (the Go client helper); StringToSign builds S and
// MAC computes sig, which the edge uses to check a request; Parse reads
// the Authorization header back into its Params.
package sign
