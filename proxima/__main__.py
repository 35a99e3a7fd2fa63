import os
import sys

# `python -m proxima` puts the current directory first on sys.path; inside a stranger's run directory
# that would let a shipped yaml.py or numpy.py run. The console script does not search it either;
# an env module named on the command line (module:Class) is still found there (envs/gym_adapter.py).
if sys.path and sys.path[0] in ("", os.getcwd()):
    sys.path.pop(0)

from proxima.cli import entry  # noqa: E402

entry()
