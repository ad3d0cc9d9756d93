# tests.cluster: a Kubernetes cluster on one machine for the tests and `make
# demo` (the test API server tests/cluster/apiserver over kubeapi/, the
# kubelet/ and controllers/ stand-ins, localcluster.py), the one client of
# it (kubeclient.py), what the suites share (harness.py, testlimit.py), and
# the suites (test_*.py, each run as python3 -m tests.cluster.test_x).
# Must not: be shipped, or import anything of the product.
