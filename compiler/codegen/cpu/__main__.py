"""``python -m compiler.codegen.cpu``: run the CPU pipeline (or one stage) on a file."""
import sys

from .pipeline import main

sys.exit(main())
