"""Run: FLASHATTN_LIB_DIR=<builddir>/packaging python3 -m unittest discover -s python/tests"""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import flashattn  # noqa: E402


class TestBasic(unittest.TestCase):
    def test_version(self):
        v = flashattn.version()
        self.assertTrue(v and v[0].isdigit(), v)
        pyproject = os.path.join(os.path.dirname(__file__), "..", "pyproject.toml")
        with open(pyproject) as f:
            self.assertIn('version = "%s"' % v, f.read())

    def test_error(self):
        e = flashattn.Error(3, "head_size 100")
        self.assertEqual(e.status, 3)
        self.assertIn("head_size 100", str(e))


if __name__ == "__main__":
    unittest.main()
