# kubeapi: a small, faithful Kubernetes API server for tests (see ../apiserver).
