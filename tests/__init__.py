# tests: the package of the project's Python test tooling, imported from the
# repository root as tests.<folder>.<module>:
#   tests.cluster   the test API server (kubeapi/), its client (kubeclient),
#                   the kubelet and controller stand-ins, the local cluster
#                   (localcluster), what the suites share (harness), the
#                   per-test time limit (testlimit), and the unittest suites;
#   tests.chart     the Helm chart's suite;
#   tests.ref       the PyTorch references (torch_vit, safetensors_io,
#                   transform_torch) and the checks against them.
# Its programs run as modules from the root (python3 -m tests.cluster.test_e2e,
# as tests/run.sh, the .bats files and `make demo` do), or with the root on
# PYTHONPATH where a script outside it runs (bench/operator_bench.py: `make
# bench`). Both Pythons import it: pyenv's python3 and Debian's
# /usr/bin/python3 (torch).
# Must not: change the import path in code; a module reaches another by its
# package name (tests.cluster.harness), never by its folder.
