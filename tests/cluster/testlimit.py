# tests/cluster/testlimit.py: the per-test time limit of the Python suites.
# Each test runs under an alarm; past its limit the test fails with an error
# that names it and the limit (and the suite goes on), so that a regression
# that hangs fails in minutes instead of at CI's limit. The limit is the
# module's own (main(limit_s)), or VITJOB_TEST_TIMEOUT seconds when set.
# Must not: hold test fixtures or a client (harness.py, kubeclient.py).

import os
import signal
import sys
import time
import unittest


class TestTimeout(BaseException):
    """Raised in the test's main thread when its limit passes. A BaseException,
    so that a test's own `except Exception` retry loops cannot swallow it."""


class _LimitedResult(unittest.TextTestResult):
    limit_s = 300

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seconds = []  # (seconds, test id), for the slowest-tests line

    def startTest(self, test):
        super().startTest(test)
        self._started = time.monotonic()
        limit = self.limit_s

        def expire(signum, frame):
            raise TestTimeout("%s: still running after its limit of %ds (VITJOB_TEST_TIMEOUT "
                              "overrides it)" % (test.id(), limit))

        signal.signal(signal.SIGALRM, expire)
        signal.alarm(limit)

    def stopTest(self, test):
        signal.alarm(0)
        self.seconds.append((time.monotonic() - self._started, test.id()))
        super().stopTest(test)


class LimitedRunner(unittest.TextTestRunner):
    resultclass = _LimitedResult

    def run(self, test):
        result = super().run(test)
        slow = sorted(result.seconds, reverse=True)[:3]
        if slow:
            print("slowest tests (limit %ds each): %s" % (
                _LimitedResult.limit_s, ", ".join("%s %.1fs" % (t, s) for s, t in slow)),
                file=sys.stderr)
        return result


def limit_for(default_s):
    """The per-test limit in seconds: VITJOB_TEST_TIMEOUT if set, else default_s."""
    env = os.environ.get("VITJOB_TEST_TIMEOUT", "")
    try:
        return int(env) if env and int(env) > 0 else default_s
    except ValueError:
        raise SystemExit("VITJOB_TEST_TIMEOUT=%r: not a whole number of seconds" % env)


def main(limit_s):
    """unittest.main() with every test limited to limit_s seconds."""
    _LimitedResult.limit_s = limit_for(limit_s)
    unittest.main(testRunner=LimitedRunner)
