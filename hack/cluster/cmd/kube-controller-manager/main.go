// Command kube-controller-manager is the upstream controller manager of the same release as kube-apiserver.
// The e2e tier runs it for garbage collection, StatefulSets, EndpointSlices, HPA, namespaces and tokens.
package main

import (
	"os"
	_ "time/tzdata" // CronJob time zones work without a system zoneinfo database.

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // --logging-format=json
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics on /metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // kubernetes_build_info on /metrics
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	os.Exit(cli.Run(app.NewControllerManagerCommand()))
}
