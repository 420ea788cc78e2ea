"""A stand-in for the expecttest package, which torch's test utilities import but Debian does
not package. It offers what torch.testing._internal.common_utils takes from it: the ACCEPT
flag and a TestCase with assertExpectedInline, which compares the actual text with the
expected literal (dedented, as expecttest writes it). It cannot rewrite the test source, so
ACCEPT stays False and a mismatch fails the test."""

import textwrap
import unittest

ACCEPT = False


def _normalize(expect):
    text = textwrap.dedent(expect)
    return text[1:] if text.startswith("\n") else text


class TestCase(unittest.TestCase):
    longMessage = True

    def assertExpectedInline(self, actual, expect, skip=0):  # noqa: N802 - expecttest's name
        self.assertMultiLineEqual(_normalize(expect), actual)

    def assertExpectedRaisesInline(self, exc_type, callable_, expect, *args, **kwargs):  # noqa: N802
        with self.assertRaises(exc_type) as caught:
            callable_(*args, **kwargs)
        self.assertExpectedInline(str(caught.exception), expect)
