# kubelet/log.py: the kubelet's log: one key=value line per event on stderr
# (ts, level, comp=kubelet, event, then the caller's fields, quoted where
# needed); debug lines only with -v (VERBOSE).
# Must not: write a token or a secret (callers pass none).

import datetime
import sys

VERBOSE = False


def log(level, event, **kv):
    if level == "debug" and not VERBOSE:
        return
    parts = ["ts=%s" % datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
             "level=%s" % level, "comp=kubelet", "event=%s" % event]
    for k, v in kv.items():
        s = str(v)
        if any(c in s for c in ' "=') or not s:
            s = '"%s"' % s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        parts.append("%s=%s" % (k, s))
    print(" ".join(parts), file=sys.stderr, flush=True)
