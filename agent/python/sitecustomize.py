"""ccrun's start-up hook for Python workers (the agent puts this directory first on PYTHONPATH).

With CCRUN_PROGRESS_FILE naming a valid progress record, ccrun_progress.install() registers the
traceback-dump signal and counts torch.distributed's collectives (see ccrun_progress.py);
otherwise nothing happens. Either way the sitecustomize this file shadows (the next one on
sys.path, e.g. Debian's /usr/lib/python3.11/sitecustomize.py) then runs as it would have.
"""


def _module_from_spec(spec):
    # importlib.util.module_from_spec without importlib.util's imports (contextlib, collections,
    # functools: milliseconds at every start-up of a script that needs none of them).
    try:
        from importlib._bootstrap import module_from_spec
    except ImportError:
        from importlib.util import module_from_spec
    return module_from_spec(spec)


def _install():
    import os
    if not os.environ.get("CCRUN_PROGRESS_FILE"):
        return
    try:
        import importlib.machinery
        import sys
        here = os.path.dirname(os.path.abspath(__file__))
        module = sys.modules.get("ccrun_progress")
        if module is None:
            spec = importlib.machinery.PathFinder.find_spec("ccrun_progress", [here])
            module = _module_from_spec(spec)
            sys.modules["ccrun_progress"] = module
            spec.loader.exec_module(module)
        module.install()
    except Exception:
        pass


def _chain():
    """Runs the next sitecustomize on sys.path after this directory, as site.py would have: it
    becomes sys.modules["sitecustomize"], and its errors go to site.py's usual report."""
    import importlib.machinery
    import os
    import sys
    here = os.path.dirname(os.path.abspath(__file__))

    def is_here(entry):
        try:
            return os.path.samefile(entry or os.curdir, here)
        except OSError:
            return False

    path = list(sys.path)
    at = next((i for i, entry in enumerate(path) if is_here(entry)), None)
    rest = path[at + 1:] if at is not None else path
    rest = [entry for entry in rest if not is_here(entry)]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = _module_from_spec(spec)
    ours = sys.modules.get("sitecustomize")
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        if ours is not None:
            sys.modules["sitecustomize"] = ours
        raise


_install()
_chain()
