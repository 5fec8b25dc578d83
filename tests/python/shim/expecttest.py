"""A stand-in for the expecttest package (PyPI), which torch's test utilities import and Debian does not package.

torch.testing._internal.common_utils derives its TestCase from expecttest.TestCase; the distributed suite never
calls what expecttest adds (assertExpectedInline, which rewrites a test's source), so the stand-in is unittest's
TestCase with that one method refusing plainly. Only tests/python/torch_dist_suite.py puts this directory on the path.
"""
import unittest

ACCEPT = False  # expecttest: rewrite expected values in place (never, here)


class TestCase(unittest.TestCase):
    def assertExpectedInline(self, actual, expect, skip=0):  # noqa: N802 (expecttest's name)
        raise NotImplementedError("expecttest stand-in (tests/python/shim): assertExpectedInline is not available")
