"""Which inference flavor a Service runs on.

- `decision`: the fallback and return state machine and the texts of its Events and findings (pure);
- `fit`: whether pods fit on nodes, counted as kube-scheduler counts requests (pure);
- `capacity`: the nodes and the pods bound to them, from informers requested on first use.

How the pod templates are shaped for the active flavor is a builder's job (`builders.flavors`).
"""
