// Command coredns is CoreDNS with only the plugins the node tier's cluster DNS needs: Service and pod names from
// the API server, a cache, health and readiness. It forwards nothing: the node has no route out.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

// The plugins run in this order whatever the Corefile says; it is the order of CoreDNS's own plugin.cfg.
func init() {
	dnsserver.Directives = []string{
		"bind",
		"ready",
		"health",
		"errors",
		"log",
		"loadbalance",
		"cache",
		"kubernetes",
	}
}

func main() {
	coremain.Run()
}
