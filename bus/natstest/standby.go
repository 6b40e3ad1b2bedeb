package natstest

import (
	"fmt"
	"net/url"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// RunStandbyPair starts two clusters of n servers, as a primary and a
// standby site: the primary's JetStream domain is "primary", the
// standby's "standby", and every standby server is a leaf node of the
// primary cluster, so that the standby can mirror the primary's streams
// (JetStream across domains) while both are up. It returns each
// cluster's servers and client URLs (comma-separated).
func RunStandbyPair(t testing.TB, n int) (primary []*server.Server, primaryURLs string, standby []*server.Server, standbyURLs string) {
	t.Helper()
	leafPorts := make([]int, n)
	var leafURLs []*url.URL
	for i := range leafPorts {
		leafPorts[i] = FreePort(t)
		leafURLs = append(leafURLs, &url.URL{Scheme: "nats-leaf", Host: fmt.Sprintf("127.0.0.1:%d", leafPorts[i])})
	}
	i := 0
	primary, primaryURLs = RunCluster(t, n, func(o *server.Options) {
		o.Cluster.Name = "primary"
		o.ServerName = fmt.Sprintf("p%d", i)
		o.JetStreamDomain = "primary"
		o.LeafNode.Host, o.LeafNode.Port = "127.0.0.1", leafPorts[i]
		i++
	})
	j := 0
	standby, standbyURLs = RunCluster(t, n, func(o *server.Options) {
		o.Cluster.Name = "standby"
		o.ServerName = fmt.Sprintf("s%d", j)
		o.JetStreamDomain = "standby"
		o.LeafNode.Remotes = []*server.RemoteLeafOpts{{URLs: leafURLs}}
		j++
	})
	return primary, primaryURLs, standby, standbyURLs
}
