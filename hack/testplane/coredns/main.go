// CoreDNS with the plugins a cluster's DNS add-on uses (the Corefile in tests/realnodes.py),
// built the way CoreDNS documents for a chosen plugin set: import the plugins, list their
// directives in CoreDNS's own order, and run coremain. The full set (core/plugin) would pull in
// every cloud provider's SDK for nothing.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

func init() {
	// The order of core/dnsserver/zdirectives.go (v1.12.0), restricted to the imported plugins.
	dnsserver.Directives = []string{
		"reload", "ready", "health", "errors", "log", "loadbalance", "cache", "kubernetes",
		"loop",
	}
}

func main() {
	coremain.Run()
}
