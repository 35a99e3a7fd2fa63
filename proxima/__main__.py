from .cli import main
from .distributed import exit_process

exit_process(main)
