#!/usr/bin/python3
# tests/cluster/test_docs.py: README.md and docs/user-guide.md are run, so
# that a stale sentence or a broken example fails `make test`. Every shell
# block (```sh, bash, shell, console) carries a marker on the line before
# its fence, and a block without one fails the test:
#   <!-- doc-test: run -->                 run here, in order, each block in
#                                          `bash -euo pipefail`
#   <!-- doc-test: run cluster -->         run on the local cluster (after the
#                                          plain ones; `last`: after the others)
#   <!-- doc-test: synopsis -->            a usage line: every --flag it shows
#                                          is in the program's --help
#   <!-- doc-test: skip reason="..." -->   not run, for the reason given
# and a YAML block may say <!-- doc-test: same-as file="PATH" -->: it is that
# file of the repository, byte for byte.
# The blocks run in a scratch directory that shows the repository (a link
# to each top-level entry) with build/bin the build's programs, the
# programs on PATH, and imgs/{train,val}/{cat,dog}/*.png, a tiny image
# folder the test writes. `make cluster` and `make cluster-down` run what
# the Makefile's recipes run (tests/cluster/up.py start/stop, the cluster in
# the scratch build/cluster; the recipes are checked to say so) without
# building; any other `make` is refused. The cluster blocks need what the
# local cluster needs (root, network namespaces, kubectl) and are skipped,
# saying why, without it. The skipped blocks and their reasons are printed
# at the end. Run from the repository root:
#   BUILD=build /usr/bin/python3 -m tests.cluster.test_docs -v
# Must not: leave the cluster running, or write outside its scratch directory.

import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest
import zlib

from tests.cluster import testlimit
from tests.cluster.localcluster import ROOT, missing_prerequisites

DOCS = ["README.md", os.path.join("docs", "user-guide.md")]
SHELL = {"sh", "bash", "shell", "console"}
MARK = re.compile(r"^<!--\s*doc-test:\s*(?P<mode>[a-z-]+)(?P<attrs>(\s+[a-z]+(=\"[^\"]*\")?)*)\s*-->\s*$")
ATTR = re.compile(r"([a-z]+)(?:=\"([^\"]*)\")?")
BUILD = os.path.abspath(os.environ.get("BUILD", os.path.join(ROOT, "build")))
WHY_NO_CLUSTER = missing_prerequisites()


class Block:
    def __init__(self, doc, line, lang, text, mark):
        self.doc, self.line, self.lang, self.text = doc, line, lang, text
        self.mode, self.attrs = None, {}
        if mark:
            m = MARK.match(mark)
            if m:
                self.mode = m.group("mode")
                self.attrs = {k: v for k, v in ATTR.findall(m.group("attrs"))}

    def where(self):
        return "%s:%d" % (self.doc, self.line)


def blocks():
    """Every fenced block of the docs, with the marker on the line before it."""
    out = []
    for doc in DOCS:
        with open(os.path.join(ROOT, doc)) as f:
            lines = f.read().split("\n")
        i = 0
        while i < len(lines):
            m = re.match(r"^```\s*([A-Za-z0-9_-]*)\s*$", lines[i])
            if not m:
                i += 1
                continue
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            mark = lines[i - 1] if i > 0 and lines[i - 1].startswith("<!--") else None
            out.append(Block(doc, i + 1, m.group(1), "\n".join(lines[i + 1:j]) + "\n", mark))
            i = j + 1
    return out


def png(path, w, h, seed):
    """A grayscale PNG of w x h, its pixels from seed."""
    raw = b"".join(b"\0" + bytes((seed * 37 + x * 7 + y * 3) % 256 for x in range(w)) for y in range(h))

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


# `make cluster` and `make cluster-down` as the Makefile's recipes run them
# (test_the_makefile_recipes_are_what_the_blocks_run), without building
PREAMBLE = r'''
make() {
  local dir=$PWD/build/cluster
  case "$*" in
    cluster) (cd "$VJ_ROOT" && /usr/bin/python3 -m tests.cluster.up start --build "$VJ_BUILD" --dir "$dir") ;;
    cluster-down) (cd "$VJ_ROOT" && /usr/bin/python3 -m tests.cluster.up stop --build "$VJ_BUILD" --dir "$dir") ;;
    *) echo "doc-test: 'make $*' is not run by tests/cluster/test_docs.py" >&2; return 1 ;;
  esac
}
'''


class DocsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.blocks = blocks()
        cls.work = tempfile.mkdtemp(prefix="vj-docs-")
        for name in os.listdir(ROOT):
            if name not in ("build", ".git"):
                os.symlink(os.path.join(ROOT, name), os.path.join(cls.work, name))
        os.makedirs(os.path.join(cls.work, "build"))
        os.symlink(os.path.join(BUILD, "bin"), os.path.join(cls.work, "build", "bin"))
        for split, n in (("train", 12), ("val", 4)):
            for c, cls_name in enumerate(("cat", "dog")):
                for i in range(n):
                    png(os.path.join(cls.work, "imgs", split, cls_name, "%03d.png" % i), 32, 32, c * 50 + i)
        cls.env = dict(os.environ, PATH=os.path.join(BUILD, "bin") + ":" + os.environ.get("PATH", ""),
                       VJ_ROOT=ROOT, VJ_BUILD=BUILD, HOME=cls.work,
                       KUBECONFIG=os.path.join(cls.work, "build", "cluster", "apiserver", "kubeconfig"))
        cls.skipped = []

    @classmethod
    def tearDownClass(cls):
        subprocess.run([sys.executable, "-m", "tests.cluster.up", "stop", "--dir",
                        os.path.join(cls.work, "build", "cluster")], cwd=ROOT, stdout=subprocess.DEVNULL)
        if cls.skipped:
            sys.stderr.write("\nblocks of the docs not run here:\n" +
                             "".join("  %s: %s\n" % s for s in cls.skipped))
        shutil.rmtree(cls.work, ignore_errors=True)

    def run_block(self, b):
        r = subprocess.run(["bash", "-euo", "pipefail", "-c", PREAMBLE + b.text], cwd=self.work, env=self.env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=240)
        self.assertEqual(r.returncode, 0, "%s: the block exited %d:\n%s\n--- its output:\n%s" %
                         (b.where(), r.returncode, b.text, r.stdout[-4000:]))

    def test_every_shell_block_is_marked_run_synopsis_or_skip_with_a_reason(self):
        bad = []
        for b in self.blocks:
            if b.lang not in SHELL:
                if b.mode not in (None, "same-as"):
                    bad.append("%s: a %s block marked %s" % (b.where(), b.lang or "plain", b.mode))
                continue
            if b.mode not in ("run", "synopsis", "skip"):
                bad.append("%s: no <!-- doc-test: run|synopsis|skip reason=\"...\" --> before it" % b.where())
            elif b.mode == "skip" and not b.attrs.get("reason", "").strip():
                bad.append("%s: skipped without a reason" % b.where())
            elif b.mode == "skip":
                type(self).skipped.append((b.where(), b.attrs["reason"]))
        self.assertEqual(bad, [], "\n".join(bad))
        self.assertGreater(sum(b.mode == "run" for b in self.blocks), 4)

    def test_synopsis_blocks_show_only_flags_their_programs_help_lists(self):
        seen = 0
        for b in (b for b in self.blocks if b.mode == "synopsis"):
            cmd = None
            for line in b.text.splitlines():
                line = line.split("#", 1)[0]
                words = line.split()
                if words and "/" in words[0] or (words and words[0].startswith("vitjob-")):
                    prog = os.path.join(BUILD, "bin", os.path.basename(words[0]))
                    sub = [words[1]] if len(words) > 1 and re.match(r"^[a-z-]+$", words[1]) else []
                    cmd = [prog] + sub + ["--help"]
                    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                       timeout=30)
                    self.assertEqual(r.returncode, 0, "%s: %s: %s" % (b.where(), " ".join(cmd), r.stdout))
                    helptext = r.stdout
                self.assertIsNotNone(cmd, "%s: no program in the synopsis" % b.where())
                for flag in re.findall(r"(?<![\w-])--[a-z][a-z-]*", line):
                    self.assertIn(flag, helptext, "%s: %s shows %s, which `%s` does not list" %
                                  (b.where(), os.path.basename(cmd[0]), flag, " ".join(cmd[1:])))
                    seen += 1
        self.assertGreater(seen, 10)

    def test_same_as_blocks_are_their_files_byte_for_byte(self):
        n = 0
        for b in (b for b in self.blocks if b.mode == "same-as"):
            with open(os.path.join(ROOT, b.attrs["file"])) as f:
                self.assertEqual(b.text, f.read(), "%s differs from %s" % (b.where(), b.attrs["file"]))
            n += 1
        self.assertGreater(n, 0)

    def test_the_makefile_recipes_are_what_the_blocks_run(self):
        with open(os.path.join(ROOT, "Makefile")) as f:
            mk = f.read()
        for target, cmd in (("cluster", "-m tests.cluster.up start --build $(BUILD)"),
                            ("cluster-down", "-m tests.cluster.up stop --build $(BUILD)")):
            m = re.search(r"(?m)^%s:.*\n((?:\t.*\n)+)" % re.escape(target), mk)
            self.assertIsNotNone(m, "the Makefile has no %s target" % target)
            self.assertIn(cmd, m.group(1), "make %s" % target)

    def test_1_the_runnable_blocks_run_here(self):
        ran = 0
        for b in self.blocks:
            if b.mode == "run" and "cluster" not in b.attrs:
                self.run_block(b)
                ran += 1
        self.assertGreater(ran, 0)

    def test_2_the_cluster_blocks_run_on_the_local_cluster(self):
        todo = [b for b in self.blocks if b.mode == "run" and "cluster" in b.attrs]
        self.assertTrue(todo)
        if WHY_NO_CLUSTER:
            type(self).skipped += [(b.where(), WHY_NO_CLUSTER) for b in todo]
            self.skipTest(WHY_NO_CLUSTER)
        todo.sort(key=lambda b: "last" in b.attrs)
        for b in todo:
            self.run_block(b)


if __name__ == "__main__":
    testlimit.main(300)
