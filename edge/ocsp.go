package edge

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"golang.org/x/crypto/ocsp"
)

// OCSP stapling. For every certificate served (files and registry) whose
// leaf names an OCSP responder and whose chain holds its issuer, the edge
// fetches the responder's answer, checks it (signed for this certificate,
// Good, current) and staples it to its handshakes, so that clients need
// not ask the CA themselves. It asks again halfway to the answer's
// NextUpdate (hourly without one). A responder that fails keeps the last
// good answer while it is current, then staples nothing; a certificate
// reported revoked gets no staple and an error in the log.

// ocspTimeout bounds one fetch from a responder; ocspMaxAge is how long
// an answer without a NextUpdate is stapled.
const (
	ocspTimeout = 5 * time.Second
	ocspMaxAge  = 24 * time.Hour
)

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// staple is a certificate with its OCSP answer, and when to ask again.
type staple struct {
	cert    *tls.Certificate // a copy of the served one, OCSPStaple set
	refresh time.Time
	expires time.Time // the answer's NextUpdate; zero: none given
}

// Staple keeps the certificates' OCSP answers until ctx ends, looking at
// them every interval (a minute is plenty: answers last hours or days).
// client makes the requests; nil is a client with ocspTimeout.
func (c *Certs) Staple(ctx context.Context, every time.Duration, client *http.Client) {
	if client == nil {
		client = &http.Client{Timeout: ocspTimeout,
			// A responder's URL comes from the certificate: go nowhere else.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	for {
		c.stapleOnce(ctx, client, time.Now(), every)
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}

// stapleOnce refreshes the answers due at now and drops those of
// certificates no longer served.
// A failed fetch is tried again after retry (the pass interval), its
// failure logged once per change.
func (c *Certs) stapleOnce(ctx context.Context, client *http.Client, now time.Time, retry time.Duration) {
	served := map[*tls.Certificate]bool{}
	for _, set := range [][]*tls.Certificate{*c.cur.Load(), c.registryCerts()} {
		for _, cert := range set {
			served[cert] = true
			old, _ := c.staples.Load(cert)
			if st, ok := old.(*staple); ok && now.Before(st.refresh) {
				continue
			}
			st, err := fetchStaple(ctx, client, cert, now)
			switch {
			case errors.Is(err, errNoResponder):
			case errors.Is(err, errRevoked):
				// Never staple the Good of before; ask again in a while.
				c.staples.Store(cert, &staple{refresh: now.Add(retry), expires: now})
				if c.ocspErrs.changed(fmt.Sprint(cert.Leaf.DNSNames), err) {
					c.log.Error("certificate revoked, says its OCSP responder: replace it", "names", cert.Leaf.DNSNames, "err", err)
				}
			case err != nil:
				// Keep the last good answer while it is current, and ask
				// again in a while, not at every pass.
				next := &staple{refresh: now.Add(retry), expires: now}
				if prev, ok := old.(*staple); ok && prev.cert != nil && now.Before(prev.expires) {
					next.cert, next.expires = prev.cert, prev.expires
					next.refresh = minTime(next.refresh, prev.expires)
				}
				c.staples.Store(cert, next)
				if c.ocspErrs.changed(fmt.Sprint(cert.Leaf.DNSNames), err) {
					c.log.Warn("OCSP staple not refreshed", "names", cert.Leaf.DNSNames, "err", err)
				}
			default:
				c.staples.Store(cert, st)
				c.ocspErrs.forget(fmt.Sprint(cert.Leaf.DNSNames))
			}
		}
	}
	c.staples.Range(func(k, _ any) bool {
		if !served[k.(*tls.Certificate)] {
			c.staples.Delete(k)
		}
		return true
	})
}

var (
	errNoResponder = errors.New("the certificate names no OCSP responder, or its chain has no issuer")
	errRevoked     = errors.New("revoked")
)

// fetchStaple asks the certificate's responder about it.
func fetchStaple(ctx context.Context, client *http.Client, cert *tls.Certificate, now time.Time) (*staple, error) {
	leaf := cert.Leaf
	if leaf == nil || len(leaf.OCSPServer) == 0 || len(cert.Certificate) < 2 || !strings.HasPrefix(leaf.OCSPServer[0], "http://") {
		return nil, errNoResponder // OCSP is plain HTTP (RFC 6960 A.1)
	}
	issuer, err := x509.ParseCertificate(cert.Certificate[1])
	if err != nil {
		return nil, fmt.Errorf("parsing the issuer: %w", err)
	}
	reqBody, err := ocsp.CreateRequest(leaf, issuer, nil)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, ocspTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, leaf.OCSPServer[0], bytes.NewReader(reqBody))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/ocsp-request")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("responder %s answered %s", leaf.OCSPServer[0], resp.Status)
	}
	der, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return nil, err
	}
	r, err := ocsp.ParseResponseForCert(der, leaf, issuer)
	if err != nil {
		return nil, fmt.Errorf("responder %s: %w", leaf.OCSPServer[0], err)
	}
	switch {
	case r.Status == ocsp.Revoked:
		return nil, fmt.Errorf("%w since %s", errRevoked, r.RevokedAt.Format(time.RFC3339))
	case r.Status != ocsp.Good:
		return nil, fmt.Errorf("responder %s does not know the certificate", leaf.OCSPServer[0])
	case !r.NextUpdate.IsZero() && !now.Before(r.NextUpdate):
		return nil, fmt.Errorf("responder %s answered with an expired response", leaf.OCSPServer[0])
	}
	stapled := *cert
	stapled.OCSPStaple = der
	st := &staple{cert: &stapled, refresh: now.Add(time.Hour), expires: r.NextUpdate}
	if r.NextUpdate.IsZero() {
		st.expires = r.ThisUpdate.Add(ocspMaxAge)
	} else {
		st.refresh = now.Add(r.NextUpdate.Sub(now) / 2)
	}
	return st, nil
}

// stapled is the certificate to serve for cert: its copy with an OCSP
// answer, when there is a current one.
func (c *Certs) stapled(cert *tls.Certificate) *tls.Certificate {
	if v, ok := c.staples.Load(cert); ok {
		if st := v.(*staple); st.cert != nil && time.Now().Before(st.expires) {
			return st.cert
		}
	}
	return cert
}
