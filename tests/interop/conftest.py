"""Shared fixtures of the tests that drive ccrun's binaries from Python."""
import os
import re
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from helpers import build_dir, binary, start_daemon  # noqa: E402,F401
