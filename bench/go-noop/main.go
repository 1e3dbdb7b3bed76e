// Command go-noop is the Go baseline for the runtime benchmark: a controller-runtime manager with one
// controller over ConfigMaps in one namespace whose reconciler only reads the object from the cache.
//
// It counts distinct (key, data["gen"]) pairs seen by the reconciler and serves the count as plain text
// at GET /count on --count-address, so the benchmark can tell when every event has been reconciled.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// noopReconciler reads the object from the cache and records the generation marker it carries.
type noopReconciler struct {
	reader client.Reader
	mu     sync.Mutex
	seen   map[string]string
	count  atomic.Int64
}

func (r *noopReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var cm corev1.ConfigMap
	if err := r.reader.Get(ctx, req.NamespacedName, &cm); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	gen := cm.Data["gen"]
	key := req.String()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen[key] != gen {
		r.seen[key] = gen
		r.count.Add(1)
	}
	return reconcile.Result{}, nil
}

func serveCount(address string, r *noopReconciler) error {
	listener, err := net.Listen("tcp", address)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/count", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "%d", r.count.Load())
	})
	go func() { _ = http.Serve(listener, mux) }()
	return nil
}

func run() error {
	namespace := flag.String("namespace", "bench", "namespace whose ConfigMaps are watched")
	countAddress := flag.String("count-address", "127.0.0.1:0", "where GET /count answers")
	workers := flag.Int("max-concurrent-reconciles", 1, "reconcile workers")
	flag.Parse()

	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{*namespace: {}}},
	})
	if err != nil {
		return err
	}
	reconciler := &noopReconciler{reader: mgr.GetCache(), seen: map[string]string{}}
	err = ctrl.NewControllerManagedBy(mgr).
		For(&corev1.ConfigMap{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: *workers}).
		Complete(reconciler)
	if err != nil {
		return err
	}
	// Answer /count only once the cache has synced, so the first answer also means "ready".
	err = mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return fmt.Errorf("cache did not sync")
		}
		if err := serveCount(*countAddress, reconciler); err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	}))
	if err != nil {
		return err
	}
	return mgr.Start(ctrl.SetupSignalHandler())
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
