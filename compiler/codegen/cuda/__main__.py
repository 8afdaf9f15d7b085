"""``python -m compiler.codegen.cuda``: run the CUDA pipeline (or one stage) on a file."""
import sys

from .pipeline import main

sys.exit(main())
