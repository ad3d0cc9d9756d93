# kubeapi/quantity.py: Kubernetes resource quantities ("100m", "1Gi", "2",
# "1e3", a JSON number) read as exact values, by the grammar of Go's
# resource.ParseQuantity. The API server's validation and the scheduler
# stand-in (../controllers) both read quantities here.
# Must not: round (values are Fractions: three pods of 100m fit in 300m), or
# accept what Go's parser refuses.

import fractions
import math
import re

_SUFFIX = {"": 1, "n": fractions.Fraction(1, 10 ** 9), "u": fractions.Fraction(1, 10 ** 6),
           "m": fractions.Fraction(1, 1000), "k": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9, "T": 10 ** 12,
           "P": 10 ** 15, "E": 10 ** 18, "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40,
           "Pi": 2 ** 50, "Ei": 2 ** 60}
_NUMBER = re.compile(r"^([+-]?)([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(.*)$")
_EXPONENT = re.compile(r"^[eE]([+-]?[0-9]+)$")
_INT32 = 2 ** 31        # Go reads the exponent as an int32


def parse_quantity(v):
    """A quantity's exact value (a Fraction), or None when Go's ParseQuantity refuses it."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return fractions.Fraction(v)
    if isinstance(v, float):
        return fractions.Fraction(v) if math.isfinite(v) else None
    if not isinstance(v, str):
        return None
    m = _NUMBER.match(v)
    if not m:
        return None
    num, suffix = fractions.Fraction(m.group(1) + m.group(2)), m.group(3)
    if suffix in _SUFFIX:
        return num * _SUFFIX[suffix]
    e = _EXPONENT.match(suffix)
    if e and -_INT32 <= int(e.group(1)) < _INT32:
        return num * fractions.Fraction(10) ** int(e.group(1))
    return None
