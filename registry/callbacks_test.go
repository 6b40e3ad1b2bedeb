package registry

import (
	"net"
	"testing"
)

func TestCallbackURLAllowlist(t *testing.T) {
	cb := &Callbacks{Allow: []string{"https://hooks.example.com/jobs/", "https://*.acme.example/cb", "http://10.0.0.5:8080/"}}
	for _, c := range []struct {
		url string
		ok  bool
	}{
		{"https://hooks.example.com/jobs/done", true},
		{"https://hooks.example.com/jobs/", true},
		{"https://HOOKS.example.com/jobs/x?y=1", true},
		{"https://hooks.example.com:443/jobs/x", true},
		{"https://hooks.example.com/job", false},           // outside the prefix
		{"https://hooks.example.com/jobs/../admin", false}, // the receiver resolves it outside the prefix
		{"https://hooks.example.com/jobs/./x", false},
		{"https://hooks.example.com/jobs/..", false},
		{"https://hooks.example.com/jobs/%2e%2e/admin", false},
		{"https://hooks.example.com/jobs/%2E%2E/admin", false},
		{"https://hooks.example.com/jobs/.%2e/admin", false},
		{"https://hooks.example.com/jobs/..%2fadmin", false},
		{"https://hooks.example.com/jobs/..%2Fadmin", false},
		{"https://hooks.example.com/jobs/..%5cadmin", false},
		{"https://hooks.example.com/jobs/..%5Cadmin", false},
		{"https://hooks.example.com/jobs/..\\admin", false},
		{"https://hooks.example.com/jobs/a%2fb", false},
		{"https://hooks.example.com/jobs/v1.2/x..y", true},       // dots inside a segment are fine
		{"https://hooks.example.com/jobs/x?next=../admin", true}, // the query is not the path
		{"http://hooks.example.com/jobs/x", false},               // another scheme
		{"https://hooks.example.com:8443/jobs/x", false},         // another port
		{"https://hooks.example.com.evil.io/jobs/x", false},
		{"https://a.acme.example/cb", true},
		{"https://a.b.acme.example/cb/x", true},
		{"https://acme.example/cb", false}, // the wildcard is for names under it
		{"https://a.acme.example/cbx", false},
		{"https://user:pw@hooks.example.com/jobs/x", false},
		{"https://hooks.example.com/jobs/x#frag", false},
		{"http://10.0.0.5:8080/x", false}, // allowed, but not public
		{"ftp://hooks.example.com/jobs/", false},
	} {
		_, err := cb.CallbackURL(c.url)
		if (err == nil) != c.ok {
			t.Errorf("%s: %v, want allowed %v", c.url, err, c.ok)
		}
	}
	cb.AllowPrivate = true
	if _, err := cb.CallbackURL("http://10.0.0.5:8080/x"); err != nil {
		t.Errorf("allow_private: %v", err)
	}
	if _, err := (&Callbacks{}).CallbackURL("https://hooks.example.com/"); err == nil {
		t.Error("an API with no allowlist took a callback URL")
	}
	var nilcb *Callbacks
	if _, err := nilcb.CallbackURL("https://hooks.example.com/"); err == nil {
		t.Error("an API with no callbacks took a callback URL")
	}
}

func TestPublicIP(t *testing.T) {
	for ip, public := range map[string]bool{
		"8.8.8.8": true, "2001:4860:4860::8888": true,
		"127.0.0.1": false, "::1": false, "10.1.2.3": false, "172.16.0.1": false, "192.168.1.1": false,
		"169.254.169.254": false, "fe80::1": false, "fc00::1": false, "0.0.0.0": false, "::": false,
		"100.64.0.1": false, "::ffff:127.0.0.1": false, "::ffff:169.254.169.254": false, "224.0.0.1": false, "255.255.255.255": false,
		"64:ff9b::a9fe:a9fe": false, "64:ff9b::808:808": false, "64:ff9b:1::1": false, "2002:a9fe:a9fe::1": false,
		"::127.0.0.1": false, "::8.8.8.8": false, "198.18.0.1": false, "198.19.255.255": false, "192.0.2.1": false,
		"198.51.100.1": false, "203.0.113.1": false, "2001::1": false, "2001:db8::1": false, "fec0::1": false,
		"100::1": false, "ff02::1": false, "::ffff:8.8.8.8": true, "1.1.1.1": true, "198.20.0.1": true,
		"2606:4700:4700::1111": true,
	} {
		if got := PublicIP(net.ParseIP(ip)); got != public {
			t.Errorf("PublicIP(%s) = %v", ip, got)
		}
	}
}

func TestCallbacksChecked(t *testing.T) {
	for doc, path := range map[string]string{
		`{"allow":["https://*x.example/"]}`:                    "async.callbacks.allow[0]",
		`{"allow":["https://h.example/?q=1"]}`:                 "async.callbacks.allow[0]",
		`{"on_success":{"url":"https://a","subject":"svc.x"}}`: "async.callbacks.on_success",
		`{"on_failure":{"subject":"jetway.api.x"}}`:            "async.callbacks.on_failure.subject",
		`{"on_failure":{"url":"file:///etc/passwd"}}`:          "async.callbacks.on_failure.url",
		`{"timeout":"5m"}`:                                     "async.callbacks.timeout",
	} {
		_, err := ParseAPI("", []byte(`{"name":"a","pool":"p","route":{"path":"/a"},"backend":{"type":"mock"},"async":{"callbacks":`+doc+`}}`))
		ve, ok := err.(*ValidationError)
		if !ok {
			t.Errorf("%s: %v", doc, err)
			continue
		}
		found := false
		for _, p := range ve.Problems {
			found = found || p.Path == path
		}
		if !found {
			t.Errorf("%s: problems %v, want one at %s", doc, ve.Problems, path)
		}
	}
}
