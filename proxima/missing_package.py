"""One line for a package that a Python call (train(), train_population(), train_rlhf()) needs and that is
not installed, in the words of the command line's own line (cli.broken_import, proxima rlhf's): the package
and the pip command that installs it, before anything is written."""

from __future__ import annotations

from .config import ProximaError, install_hint

class MissingPackageError(ProximaError, ModuleNotFoundError):
    """A package that a Python call needs is not installed: one line naming it and the command that
    installs it. A ModuleNotFoundError (``except ImportError`` still catches it; ``name`` is the module)
    and a ProximaError (what a user can change)."""


def require(call: str, modules: dict, extra: str) -> None:
    """MissingPackageError for the first of ``modules`` (module -> distribution) not found, naming ``call``
    (``train()``) and the install command of ``extra`` (``""``: Proxima's core dependencies). Only looked up
    (doctor.module_found), never imported: tensorboard and transformers take seconds to import."""
    from .doctor import module_found

    for module, dist in modules.items():
        if not module_found(module):
            raise MissingPackageError(f"{dist} is not installed, and {call} needs it: {install_hint(extra)}",
                                      name=module)


def require_core(call: str) -> None:
    """require() of the core dependencies every proxima command but doctor needs (cli.REQUIRED_FOUND)."""
    from .cli import REQUIRED_FOUND

    require(call, REQUIRED_FOUND, "")


def require_rlhf(call: str) -> None:
    """require() of the rlhf extra's modules, those whose absence proxima rlhf names (rlhf/cli.RLHF_MODULES)."""
    from .rlhf.cli import RLHF_MODULES

    require(call, {m: m for m in RLHF_MODULES}, "rlhf")
