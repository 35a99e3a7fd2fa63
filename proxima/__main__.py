import os

# launch_torchrun set PYTHONSAFEPATH for torchrun and its ranks (this process already started with it):
# programs a rank starts (a user's env running `python helper.py`) get the environment the user gave
if os.environ.pop("PROXIMA_SAFE_PATH_SET", None) == "1":
    os.environ.pop("PYTHONSAFEPATH", None)

from .cli import entry  # noqa: E402

entry()
