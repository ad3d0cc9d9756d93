# controllers/log.py: the controllers' log: one key=value line per event on
# stderr (ts, level, then the caller's fields, values quoted where needed);
# debug lines only with -v (VERBOSE).
# Must not: write a token or any other credential (callers pass none).

import datetime
import json
import sys

VERBOSE = False


def _fmt(v):
    s = str(v)
    if s == "" or any(c in s for c in ' "=\\') or any(ord(c) < 32 or ord(c) == 127 for c in s):
        return json.dumps(s)
    return s


def log(level, **kv):
    if level == "debug" and not VERBOSE:
        return
    ts = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    parts = ["ts=" + ts, "level=" + level] + ["%s=%s" % (k, _fmt(v)) for k, v in kv.items()]
    sys.stderr.write(" ".join(parts) + "\n")
    sys.stderr.flush()
