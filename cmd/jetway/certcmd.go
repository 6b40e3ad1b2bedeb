package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jetway-gw/jetway/registry"
)

const certUsage = `Usage: jetway cert <command> [flags] [args]

Commands:
  put NAME --cert FILE --key FILE   check a certificate chain and its key (PEM) and store
                                    them; every edge with TLS serves it within a second to
                                    the clients whose server name it covers (replace it to
                                    rotate: connections already open keep theirs)
  list                              list the certificates: names covered, validity
  delete NAME                       remove a certificate: edges stop serving it

Certificates live in the bucket jetway_certs with their private keys: only
the admin writes it and only edges read it. An edge serves them only with TLS
on (--tls-cert or --acme-host); without a --tls-cert a server name no
certificate covers fails its handshake.

Flags:
`

func cmdCert(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("jetway cert", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rf := addRegistryFlags(fs)
	certFile := fs.String("cert", "", "put: PEM certificate chain file")
	keyFile := fs.String("key", "", "put: PEM private key file")
	fs.Usage = func() { groupUsage(stderr, fs, "cert", certUsage, args) }
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if err := checkSubcommand(fs, "cert", pos, map[string]int{"put": 1, "list": 0, "delete": 1}); err != nil {
		return err
	}
	var certPEM, keyPEM []byte
	if pos[0] == "put" {
		if *certFile == "" || *keyFile == "" {
			return fmt.Errorf("%w: jetway cert put needs --cert and --key", errUsage)
		}
		if certPEM, err = os.ReadFile(*certFile); err != nil {
			return fmt.Errorf("%w: --cert: %v", errUsage, err)
		}
		if keyPEM, err = os.ReadFile(*keyFile); err != nil {
			return fmt.Errorf("%w: --key: %v", errUsage, err)
		}
	}
	ctx, c, done, err := rf.dial(1)
	if err != nil {
		return err
	}
	defer done()
	switch pos[0] {
	case "put":
		got, err := c.PutCert(ctx, &registry.Cert{Name: pos[1], CertPEM: string(certPEM), KeyPEM: string(keyPEM)})
		if err != nil {
			return describeInvalid(err, stderr, "certificate")
		}
		fmt.Fprintf(stdout, "stored certificate %s for %s, valid until %s, at revision %d\n", got.Name,
			strings.Join(got.TLS.Leaf.DNSNames, ", "), got.TLS.Leaf.NotAfter.Format(time.RFC3339), got.Revision)
	case "delete":
		if err := c.DeleteCert(ctx, pos[1]); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "deleted certificate %s\n", pos[1])
	case "list":
		es, err := c.ListCerts(ctx)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tNAMES\tNOT AFTER\tREVISION")
		for _, e := range es {
			if e.Err != nil {
				fmt.Fprintf(tw, "%s\tinvalid: %v\t-\t%d\n", e.Key, e.Err, e.Revision)
				continue
			}
			l := e.Value.TLS.Leaf
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", e.Key, strings.Join(l.DNSNames, ","), l.NotAfter.Format(time.RFC3339), e.Revision)
		}
		return tw.Flush()
	}
	return nil
}
