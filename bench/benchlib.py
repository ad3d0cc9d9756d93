"""bench/benchlib.py - what the benchmarks that train with vitjob-worker on
loopback share (bench/ranks_bench.py, bench/plan_bench.py): a free port,
and `world` ranks of `vitjob-worker train` started together with the
job's environment (replicas, rank, restart 0, the rendezvous on loopback),
each rank's stderr in tmp/rank-<r>.log.
Must not: parse what the ranks log or print anything (each bench reads the
lines it reports).
"""
import os
import socket
import subprocess


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def train_ranks(worker, world, args, tmp):
    """Runs `worker train ARGS` as ranks 0..world-1 and waits for all of
    them. Returns (exit codes, each rank's log text), rank order."""
    port = free_port()
    procs = []
    for r in range(world):
        env = dict(os.environ, VITJOB_REPLICAS=str(world), VITJOB_RANK=str(r), VITJOB_RESTART="0",
                   VITJOB_RDZV_ENDPOINT="127.0.0.1:%d" % port, VITJOB_COMM_HOST="127.0.0.1")
        log = open(os.path.join(tmp, "rank-%d.log" % r), "w")
        procs.append((subprocess.Popen([worker, "train"] + args, env=env,
                                       stdout=subprocess.DEVNULL, stderr=log), log))
    codes = []
    for p, log in procs:
        codes.append(p.wait())
        log.close()
    logs = [open(os.path.join(tmp, "rank-%d.log" % r)).read() for r in range(world)]
    return codes, logs
