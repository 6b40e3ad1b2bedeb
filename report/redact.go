package report

import "net/url"

// RedactedURL is a report webhook's URL without its path and query, which
// may hold a secret (a token in the path, a key in the query): what a
// delivery error, a log line or the admin API shows of it.
func RedactedURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(the webhook url)"
	}
	if u.Path == "" && u.RawQuery == "" {
		return u.Scheme + "://" + u.Host
	}
	return u.Scheme + "://" + u.Host + "/…"
}
