// Command pause is PID 1 of a pod sandbox: it holds the pod's namespaces open until the kubelet stops the sandbox.
//
// As PID 1 it inherits every orphaned process in the pod's PID namespace (when the pod shares one), so it reaps
// them; otherwise they would stay zombies until the sandbox ends. SIGINT and SIGTERM end it with status 0, the
// signal the container runtime sends on sandbox stop. The standard library only: the binary is static (CGO off)
// and runs from an otherwise empty image.
package main

import (
	"errors"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// Buffered: signal.Notify drops signals the channel cannot take, and SIGCHLDs coalesce anyway, so each one
	// reaps every exited child rather than one.
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	// Children that exited before Notify took effect sent their SIGCHLD to nobody.
	reap()
	for sig := range signals {
		if sig == syscall.SIGCHLD {
			reap()
			continue
		}
		os.Exit(0)
	}
}

// reap collects every child that has exited, without blocking on those still running.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return // ECHILD (no children) or none exited yet
		}
	}
}
