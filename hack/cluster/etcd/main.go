// Command etcd is the upstream etcd server, built from its Go modules at the version Kubernetes tests against.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
