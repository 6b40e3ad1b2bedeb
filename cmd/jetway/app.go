package main

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jetway-gw/jetway/registry"
)

const appUsage = `Usage: jetway app <command> [flags] [args]

Commands:
  create ID [--name N] [--api GLOB ...] [--ip CIDR ...] [--hmac] [--sandbox]
            [--cert-name NAME ... --cert-ca FILE]
                       make an app and its first API key; the key is shown
                       once, here, and only its SHA-256 digest is stored;
                       --hmac also makes a request-signing secret (shown once);
                       --sandbox makes it a sandbox app (see sandbox)
  get ID               show an app (never its keys, only their ids)
  list                 list the apps
  disable ID           refuse the app's keys from now on (enable ID undoes it)
  enable ID
  rotate-key ID        make a new key and drop the old ones
  rotate-secret ID     make a new request-signing (HMAC) secret and drop the old ones
  limit ID N [WINDOW]  cap the app's calls across all APIs at N per WINDOW
                       (default 1s) on each edge; N 0 removes the cap
  grant ID GLOB        allow the app an API name, "prefix.*" or "*"
  revoke ID GLOB
  sandbox ID on|off    send the app's calls to each API's sandbox tier (on),
                       or to production (off); live on every edge at once
  jwt ID --issuer ISS --jwks FILE|URL --alg ALG [--alg ...] [--audience AUD]
                       the app's own token issuer: bearer tokens whose iss is
                       ISS are checked with its keys (and only those) and are
                       the app's, on every API that accepts jwt
  jwt ID off           drop the app's own issuer

Apps live in the JetStream KV bucket jetway_apps (key = app id). An API
that has "auth": {"methods": ["key"]} admits only callers with an active
app's key (X-Api-Key: <key> or Authorization: ApiKey <key>) and, unless
"granted_only": false, only apps granted the API. Backends get the app id in
X-Jetway-App.

A sandbox app reaches only the sandbox tier of an API ("sandbox" in its
entry: its own backend, pool and limits, on jetway.sandbox.<pool>.<api>); an API
without one answers it 403 NO_SANDBOX. Backends of the tier get
X-Jetway-Sandbox: true.

Flags:
`

func cmdApp(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("jetway app", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rf := addRegistryFlags(fs)
	adm := addAdminFlags(fs)
	name := fs.String("name", "", "create: a human name")
	var apis, ips, certNames stringList
	fs.Var(&apis, "api", "create: an API the app may call (name, \"prefix.*\" or \"*\"); repeat for several")
	fs.Var(&ips, "ip", "create: the only client addresses or CIDRs the app may call from; repeat for several")
	fs.Var(&certNames, "cert-name", "create: a name (DNS, URI or email SAN, or the CN of a certificate without SANs) whose verified TLS client certificate is this app's, on APIs with the mtls method; repeat for several (needs --cert-ca)")
	certCA := fs.String("cert-ca", "", "create: PEM file of the CA that signs the app's client certificates (its SHA-256 fingerprint is stored)")
	withHMAC := fs.Bool("hmac", false, "create: also make a request-signing (HMAC) secret")
	sandbox := fs.Bool("sandbox", false, "create: make a sandbox app (its calls go to the APIs' sandbox tiers)")
	issuer := fs.String("issuer", "", "jwt: the iss of the app's tokens")
	jwks := fs.String("jwks", "", "jwt: the issuer's keys, a JWKS file on every edge or an https:// URL")
	audience := fs.String("audience", "", "jwt: the aud the app's tokens must carry (none checked if empty)")
	var algs stringList
	fs.Var(&algs, "alg", "jwt: an algorithm the app's tokens may use (RS256, ES256, EdDSA, HS256, ...); repeat for several")
	fs.Usage = func() { groupUsage(stderr, fs, "app", appUsage, args) }
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if err := checkSubcommand(fs, "app", pos, map[string]int{"create": 1, "get": 1, "list": 0, "disable": 1, "enable": 1, "rotate-key": 1, "rotate-secret": 1, "grant": 2, "revoke": 2, "limit": -1, "sandbox": 2, "jwt": -1}); err != nil {
		return err
	}
	// newApp is the app create makes, from the flags.
	newApp := func() (*registry.App, error) {
		app := &registry.App{ID: pos[1], Name: *name, Status: registry.AppActive, APIs: apis, IPAllow: ips, Sandbox: *sandbox, CertNames: certNames}
		if *certCA != "" {
			fp, err := fingerprintFile(*certCA)
			if err != nil {
				return nil, fmt.Errorf("%w: --cert-ca: %v", errUsage, err)
			}
			app.CertCA = fp
		}
		return app, nil
	}
	if rest, err := adm.use(fs, slices.Contains([]string{"create", "get", "list", "disable", "enable", "rotate-key", "rotate-secret", "grant", "revoke"}, pos[0])); err != nil {
		return err
	} else if rest {
		c, err := adm.client(*rf.timeout)
		if err != nil {
			return err
		}
		var app *registry.App
		if pos[0] == "create" {
			if app, err = newApp(); err != nil {
				return err
			}
		}
		return describeInvalid(appOverREST(c, pos, app, *withHMAC, stdout), stderr, "app")
	}
	ctx, c, done, err := rf.dial(1)
	if err != nil {
		return err
	}
	defer done()

	// update changes an app with a compare-and-set on its revision,
	// applying change again to a fresh read if another writer got in
	// between (registry.UpdateApp): concurrent commands never undo each
	// other, and what is printed is what was stored.
	update := func(id string, change func(a *registry.App) error) (*registry.App, error) {
		a, err := c.UpdateApp(ctx, id, change)
		if err != nil {
			return nil, describeInvalid(err, stderr, "app")
		}
		return a, nil
	}
	switch pos[0] {
	case "create":
		app, err := newApp()
		if err != nil {
			return err
		}
		key, secret, a, err := c.CreateApp(ctx, app, *withHMAC)
		if errors.Is(err, registry.ErrConflict) {
			return fmt.Errorf("app %s exists already (rotate-key gives it a new key)", pos[1])
		}
		if err != nil {
			return describeInvalid(err, stderr, "app")
		}
		fmt.Fprintf(stdout, "created app %s (revision %d)\nAPI key (shown once, store it now): %s\n", a.ID, a.Revision, key)
		if *withHMAC {
			fmt.Fprintf(stdout, "signing secret (shown once, store it now): %s\n", secret)
		}
	case "rotate-key":
		key, a, err := c.RotateAppKey(ctx, pos[1])
		if err != nil {
			return describeInvalid(err, stderr, "app")
		}
		fmt.Fprintf(stdout, "new key for app %s; the old ones no longer work (revision %d)\nAPI key (shown once, store it now): %s\n", a.ID, a.Revision, key)
	case "rotate-secret":
		secret, a, err := c.RotateAppSecret(ctx, pos[1])
		if err != nil {
			return describeInvalid(err, stderr, "app")
		}
		fmt.Fprintf(stdout, "new signing secret for app %s; the old ones no longer verify (revision %d)\nsigning secret (shown once, store it now): %s\n", a.ID, a.Revision, secret)
	case "limit":
		if len(pos) < 3 || len(pos) > 4 {
			return fmt.Errorf("%w: jetway app limit ID N [WINDOW]", errUsage)
		}
		n, err := strconv.Atoi(pos[2])
		window := time.Second
		if err == nil && len(pos) == 4 {
			window, err = time.ParseDuration(pos[3])
		}
		if err != nil || n < 0 {
			return fmt.Errorf("%w: jetway app limit ID N [WINDOW]: N a number, WINDOW a duration such as 1m", errUsage)
		}
		a, err := update(pos[1], func(a *registry.App) error {
			a.RateLimit = nil
			if n > 0 {
				a.RateLimit = &registry.AppLimit{Limit: n, Window: registry.Duration(window)}
			}
			return nil
		})
		if err != nil {
			return err
		}
		if a.RateLimit == nil {
			fmt.Fprintf(stdout, "app %s has no limit of its own\n", a.ID)
		} else {
			fmt.Fprintf(stdout, "app %s: at most %d calls per %v on each edge\n", a.ID, n, window)
		}
	case "disable", "enable":
		status := map[string]string{"disable": registry.AppDisabled, "enable": registry.AppActive}[pos[0]]
		a, err := update(pos[1], func(a *registry.App) error { a.Status = status; return nil })
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "app %s is %s\n", a.ID, a.Status)
	case "sandbox":
		on, ok := map[string]bool{"on": true, "off": false}[pos[2]]
		if !ok {
			return fmt.Errorf("%w: jetway app sandbox ID on|off", errUsage)
		}
		a, err := update(pos[1], func(a *registry.App) error { a.Sandbox = on; return nil })
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "app %s calls %s (revision %d)\n", a.ID, tierName(a.Sandbox), a.Revision)
	case "jwt":
		var cfg *registry.JWTAuth
		switch {
		case len(pos) == 3 && pos[2] == "off":
		case len(pos) == 2 && *issuer != "" && *jwks != "" && len(algs) > 0:
			cfg = &registry.JWTAuth{Issuer: *issuer, Audience: *audience, Algorithms: algs}
			if strings.HasPrefix(*jwks, "https://") || strings.HasPrefix(*jwks, "http://") {
				cfg.JWKSURL = *jwks
			} else {
				cfg.JWKSFile = *jwks
			}
		default:
			return fmt.Errorf("%w: jetway app jwt ID --issuer ISS --jwks FILE|URL --alg ALG [--audience AUD], or jetway app jwt ID off", errUsage)
		}
		a, err := update(pos[1], func(a *registry.App) error { a.JWT = cfg; return nil })
		if err != nil {
			return err
		}
		if a.JWT == nil {
			fmt.Fprintf(stdout, "app %s has no token issuer of its own (revision %d)\n", a.ID, a.Revision)
		} else {
			fmt.Fprintf(stdout, "tokens issued by %s are app %s's (revision %d)\n", a.JWT.Issuer, a.ID, a.Revision)
		}
	case "grant":
		a, err := update(pos[1], func(a *registry.App) error {
			if !slices.Contains(a.APIs, pos[2]) {
				a.APIs = append(a.APIs, pos[2])
			}
			return nil
		})
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "app %s may call %s\n", a.ID, orNone(a.APIs))
	case "revoke":
		a, err := update(pos[1], func(a *registry.App) error {
			a.APIs = slices.DeleteFunc(a.APIs, func(g string) bool { return g == pos[2] })
			return nil
		})
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "app %s may call %s\n", a.ID, orNone(a.APIs))
	case "get":
		a, err := c.GetApp(ctx, pos[1])
		if err != nil {
			return err
		}
		printApp(stdout, a)
	case "list":
		es, err := c.ListApps(ctx)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tNAME\tSTATUS\tTIER\tKEYS\tAPIS\tREVISION")
		for _, e := range es {
			if e.Err != nil {
				fmt.Fprintf(tw, "%s\t-\tinvalid\t-\t-\t%v\t%d\n", e.Key, e.Err, e.Revision)
				continue
			}
			a := e.Value
			tier := "production"
			if a.Sandbox {
				tier = "sandbox"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%d\n", a.ID, a.Name, a.Status, tier, len(a.Keys), strings.Join(a.APIs, ","), e.Revision)
		}
		return tw.Flush()
	}
	return nil
}

func printApp(w io.Writer, a *registry.App) {
	issuer := "-"
	if a.JWT != nil {
		issuer = a.JWT.Issuer + " (" + a.JWT.JWKSFile + a.JWT.JWKSURL + ")"
	}
	fmt.Fprintf(w, "id:       %s\nname:     %s\nstatus:   %s\ncalls:    %s\napis:     %s\nip_allow: %s\nsigning:  %d secret(s)\nissuer:   %s\ncerts:    %s\nrevision: %d\nkeys:\n",
		a.ID, a.Name, a.Status, tierName(a.Sandbox), strings.Join(a.APIs, ", "), strings.Join(a.IPAllow, ", "), len(a.HMACSecrets), issuer, strings.Join(a.CertNames, ", "), a.Revision)
	for _, k := range a.Keys {
		fmt.Fprintf(w, "  %s…  created %s\n", k.ID, k.Created.Format(time.RFC3339))
	}
}

// tierName says which tier an app's calls go to.
func tierName(sandbox bool) string {
	if sandbox {
		return "the sandbox tier"
	}
	return "production"
}

func orNone(list []string) string {
	if len(list) == 0 {
		return "no API"
	}
	return strings.Join(list, ", ")
}

// fingerprintFile is the SHA-256 fingerprint of the first certificate in
// a PEM file.
func fingerprintFile(name string) (string, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return "", err
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return "", fmt.Errorf("%s holds no PEM certificate", name)
	}
	if _, err := x509.ParseCertificate(blk.Bytes); err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	return registry.CertFingerprint(blk.Bytes), nil
}
