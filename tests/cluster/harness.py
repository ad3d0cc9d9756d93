# tests/cluster/harness.py: what the cluster tests share: starting the test
# API server as a subprocess (port 0, temp state dir) and a client of it
# (kubeclient.py: trusts its CA, sends its token), polling until a condition
# holds (wait_for), stopping a child process politely (stop_process), and
# reading YAML test data.
# Must not: hold an API client of its own (kubeclient.py is the one).

import os
import signal
import subprocess
import sys
import time

from tests.cluster import kubeclient

HERE = os.path.dirname(os.path.abspath(__file__))
APISERVER = os.path.join(HERE, "apiserver")
CRD = os.path.join(HERE, "testdata", "crd.yaml")


# The least any wait_for waits before it fails: a cap, never a delay (it
# returns as soon as fn holds), so shorter ones only fail a loaded machine.
MIN_WAIT_S = 30.0


def wait_for(what, fn, timeout=MIN_WAIT_S, interval=0.1):
    """Polls fn until it returns a truthy value, which it returns; fails naming
    `what` after timeout seconds (at least MIN_WAIT_S). Not for showing that
    something does not happen: that is a sleep and a look."""
    timeout = max(timeout, MIN_WAIT_S)
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError("timed out after %ss waiting for %s (last: %r)" % (timeout, what, last))


def stop_process(proc, timeout=10, sig=signal.SIGTERM):
    """Sends sig to a child still running, waits up to timeout, then kills it;
    returns its exit status."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


class ServerProcess:
    def __init__(self, state, port=0, args=()):
        self.state = state
        try:
            os.unlink(os.path.join(state, "port"))   # rewritten when the server is ready
        except FileNotFoundError:
            pass
        os.makedirs(state, exist_ok=True)
        self.log = open(os.path.join(state, "apiserver.log"), "a")
        self.proc = subprocess.Popen([sys.executable, APISERVER, "--state", state, "--port", str(port)]
                                     + list(args), stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        path = os.path.join(state, "port")
        while not os.path.exists(path):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("apiserver did not start; see %s/apiserver.log" % state)
            time.sleep(0.05)
        with open(path) as f:
            self.port = int(f.read())
        with open(os.path.join(state, "token")) as f:
            self.token = f.read().strip()
        self.kubeconfig = os.path.join(state, "kubeconfig")
        self.ca = os.path.join(state, "pki", "ca.crt")

    def stop(self):
        stop_process(self.proc)
        self.log.close()

    def client(self, token=None):
        return kubeclient.for_server(self.port, self.ca, self.token if token is None else token)


def load_yaml_docs(path):
    import yaml
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]
