# tests/cluster/controllers: a stand-in for kube-scheduler and the parts of
# kube-controller-manager (Kubernetes 1.26 behaviour) that the one-machine
# test cluster needs, run as one process (__main__.py). One module per
# controller (scheduler, deployment, replicaset, nodelifecycle, taintmanager,
# podgc; and kueue, a stand-in for Kueue's plain-pod group path that runs
# while Kueue's CRDs are served: KUEUE_FACTS.md holds the facts it follows),
# each a base.Controller over the one API client the process holds;
# manager.py lists the objects once per pass and hands them to each.
# Must not: be shipped, or import anything of the product.
