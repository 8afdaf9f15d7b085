"""``not CMD...``: run CMD and succeed only if it fails (lit's ``not``); a
crash (killed by a signal) still counts as a failure of the test."""
import subprocess
import sys

rc = subprocess.call(sys.argv[1:])
sys.exit(0 if rc > 0 else 1)
