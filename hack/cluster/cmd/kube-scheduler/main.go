// Command kube-scheduler is the upstream scheduler of the same release as kube-apiserver.
// The e2e tier runs it so that pods land on the simulated nodes whose capacity and labels fit.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // --logging-format=json
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics on /metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // kubernetes_build_info on /metrics
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	os.Exit(cli.Run(app.NewSchedulerCommand()))
}
