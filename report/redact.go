package report

import "net/url"

// RedactedURL is a webhook's URL without its user, path, query and
// fragment, which may hold a secret (a token in the path, a key in the
// query, a password before the host): what a delivery error, a log line
// or the admin API shows of it. Anything past scheme://host is one "/…",
// so a URL that had any of them never reads as one that had none.
func RedactedURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(the webhook url)"
	}
	if u.User == nil && u.Path == "" && u.RawQuery == "" && u.Fragment == "" && !u.ForceQuery {
		return u.Scheme + "://" + u.Host
	}
	return u.Scheme + "://" + u.Host + "/…"
}

// KeptURL is the URL a write of a webhook should store when the stored
// one is stored and the write gives given: stored when given is exactly
// stored's redacted form (an edit of what the admin API showed, which
// keeps the secret), else given. A given URL with another scheme or host
// never keeps stored's secret path.
func KeptURL(given, stored string) string {
	if stored != "" && given == RedactedURL(stored) {
		return stored
	}
	return given
}

// IsRedacted says whether a URL is one RedactedURL made (its path is
// "/…", or it is the placeholder of one that did not parse): a write
// that gives one and has no stored URL to keep would store the
// placeholder instead of a webhook.
func IsRedacted(raw string) bool {
	if raw == "(the webhook url)" {
		return true
	}
	u, err := url.Parse(raw)
	return err == nil && u.Path == "/…" && u.RawQuery == "" && u.User == nil
}
