"""The scheduler extender: kube-scheduler's HTTP filter and prioritize verbs, deciding by inference flavor."""
