package sign

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Async job callbacks (Jetway's docs/async.md). When a job ends, Jetway
// POSTs its status to the callback URL its caller gave, signed with a key
// derived from the calling app's signing secret and the job's id — the
// workers that send callbacks never hold the secret itself:
//
//	Jetway-Signature: JW1-HMAC-SHA256 app=<app id>,ts=<unix seconds>,nonce=<nonce>,headers=jetway-job;jetway-job-state,sig=<signature>
//
// sig is as in Sign, over the callback's own method, path, query, body
// and the two headers, with CallbackKey(secret, job) as the key.

// CallbackHeader carries a callback's signature.
const CallbackHeader = "Jetway-Signature"

// The headers every callback has and signs: the job's id and its state.
const (
	CallbackJobHeader   = "Jetway-Job"
	CallbackStateHeader = "Jetway-Job-State"
)

var callbackSigned = []string{"jetway-job", "jetway-job-state"}

// CallbackKey is the key the callbacks of job are signed with: HMAC-SHA256
// of "jetway-callback", a NUL byte and the job id, under the app's
// signing secret.
func CallbackKey(secret []byte, job string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("jetway-callback\x00" + job))
	return m.Sum(nil)
}

// SignCallback signs a callback request r whose body is body, for app
// with the job's callback key (CallbackKey). r must carry the job's
// CallbackJobHeader and CallbackStateHeader.
func SignCallback(r *http.Request, body []byte, app string, key []byte) error {
	var nb [18]byte
	if _, err := rand.Read(nb[:]); err != nil {
		return err
	}
	nonce := base64.RawURLEncoding.EncodeToString(nb[:])
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	s := StringToSign(r.Method, r.URL.EscapedPath(), r.URL.RawQuery, ts, nonce, body, callbackSigned, r.Header)
	r.Header.Set(CallbackHeader, fmt.Sprintf("%s app=%s,ts=%s,nonce=%s,headers=%s,sig=%s", Scheme, app, ts, nonce, "jetway-job;jetway-job-state", MAC(key, s)))
	return nil
}

// ErrCallbackSignature is the error of a callback whose signature does not
// verify.
var ErrCallbackSignature = errors.New("callback signature does not verify")

// VerifyCallback checks a callback received as r with body: signed for app
// by one of the app's signing secrets, with the job and state headers, at
// a time within maxSkew of now. It returns the job's id. A receiver should
// also act on each (job, state) once: a callback may be delivered again.
func VerifyCallback(r *http.Request, body []byte, app string, secrets [][]byte, maxSkew time.Duration, now time.Time) (string, error) {
	p, err := Parse(r.Header.Get(CallbackHeader))
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrCallbackSignature, err)
	}
	if p.App != app || len(p.Headers) != 2 || p.Headers[0] != callbackSigned[0] || p.Headers[1] != callbackSigned[1] {
		return "", fmt.Errorf("%w: not signed for app %s with the job's headers", ErrCallbackSignature, app)
	}
	ts, err := strconv.ParseInt(p.TS, 10, 64)
	if err != nil || now.Sub(time.Unix(ts, 0)).Abs() > maxSkew {
		return "", fmt.Errorf("%w: its time is not within %v of now", ErrCallbackSignature, maxSkew)
	}
	job := r.Header.Get(CallbackJobHeader)
	if job == "" {
		return "", fmt.Errorf("%w: no %s header", ErrCallbackSignature, CallbackJobHeader)
	}
	s := StringToSign(r.Method, r.URL.EscapedPath(), r.URL.RawQuery, p.TS, p.Nonce, body, p.Headers, r.Header)
	for _, secret := range secrets {
		if hmac.Equal([]byte(MAC(CallbackKey(secret, job), s)), []byte(p.Sig)) {
			return job, nil
		}
	}
	return "", ErrCallbackSignature
}
