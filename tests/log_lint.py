#!/usr/bin/env python3
"""tests/log_lint.py: every string a log line carries goes through log.h's
one quoting (LOGV, LOGVF, log_value). Reads each LOG_DEBUG/INFO/WARN/ERROR
call of the C sources given (or of git ls-files), pairs each conversion of
its format with its argument, and prints every call where a %s takes
anything but a quoted value, a conditional between string literals (or
quoted values), or an argument marked /* pairs: ... */ (a run of key=value
pairs the caller built from fixed keys and numbers); and every format that
quotes a value by hand (\\"%s\\"). Exits 1 when it printed anything."""
import re
import subprocess
import sys

CONV = re.compile(r'%[-+ #0]*(\*|[0-9]+)?(\.(\*|[0-9]+))?(hh|h|ll|l|z|j|t|L)?([a-zA-Z%])')
LITERAL = r'\s*("([^"\\]|\\.)*"|LOGVF?\(.*\))\s*'
SAFE = re.compile(r'(LOGVF?|log_value)\(.*|[^"?]*\?' + LITERAL + ':' + LITERAL + r'|.*/\* pairs:.*',
                  re.S)


def call_args(s, i):
    """The top-level arguments of the call whose '(' ends at s[i-1]."""
    args, depth, start, j = [], 1, i, i
    while depth:
        c = s[j]
        if c == '"' or c == "'":
            j += 1
            while s[j] != c:
                j += 2 if s[j] == '\\' else 1
        elif c == '/' and s[j + 1] == '*':
            j = s.index('*/', j) + 1
        elif c in '([{':
            depth += 1
        elif c in ')]}':
            depth -= 1
        elif c == ',' and depth == 1:
            args.append(s[start:j])
            start = j + 1
        j += 1
    args.append(s[start:j - 1])
    return args


def main(files):
    bad = []
    for f in files:
        s = open(f, encoding='utf-8').read()
        for m in re.finditer(r'\bLOG_(DEBUG|INFO|WARN|ERROR)\(', s):
            if s[m.start() - 8:m.start()] == '#define ':
                continue
            line = s.count('\n', 0, m.start()) + 1
            args = call_args(s, m.end())
            fmt = ''.join(re.findall(r'"((?:[^"\\]|\\.)*)"', args[1]))
            if re.search(r'\\"[^"\\]*%[-0-9.]*s[^"]*\\"', fmt):
                bad.append('%s:%d: a value quoted by hand: %s' % (f, line, fmt))
            convs = [c for c in CONV.finditer(fmt) if c.group(5) != '%']
            rest = args[2:]
            for c in convs:
                if c.group(1) == '*' or c.group(3) == '*':
                    rest = rest[1:]
                arg = rest[0].strip() if rest else ''
                rest = rest[1:]
                if c.group(5) == 's' and not SAFE.fullmatch(arg):
                    bad.append('%s:%d: %%s takes %s, not LOGV(...)' % (f, line, ' '.join(arg.split())))
    for b in bad:
        print(b)
    return 1 if bad else 0


if __name__ == '__main__':
    files = sys.argv[1:] or [f for f in subprocess.check_output(
        ['git', 'ls-files', '*.c', '*.cc', '*.cu'], text=True).split()
        if not f.startswith('tests/') and f != 'lib/log.c']
    sys.exit(main(files))
