// The LeaderWorkerSet release whose CRD llmaz.envtest installs (LWS must exist for llmaz's Service controller).
// Only the module's files are used; nothing here is compiled.
module llmaz.io/hack/cluster/lws

go 1.25.0

require sigs.k8s.io/lws v0.6.2
