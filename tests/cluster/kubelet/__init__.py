# tests/cluster/kubelet: a local kubelet for the one-machine test cluster,
# run as one process per node (__main__.py); a test and demo tool, never
# shipped. Split by concern: the node and its Lease (node.py), the pod
# network (network.py, dns.py), what a container gets (volumes.py, env.py,
# downward.py, image.py, mounts.py), running it (runtime.py, pods.py), its
# output (logs.py) served to the API server (server.py, the kubelet API), what
# is reported (status.py), and the sync loop tying them (sync.py); all talk
# to the API server through one client (api.py over kubeclient.py).
# Must not: log a token or a secret; touch pods of other nodes.
