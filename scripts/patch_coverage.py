"""Which of the installed transformers' gated feed-forward classes ``fusedmlp.patch`` rule 1 follows.

    python scripts/patch_coverage.py

Lists every ``*MLP`` class of ``transformers.models`` whose ``__init__`` names ``gate_proj``,
``up_proj`` and ``down_proj`` (or ``gate_up_proj`` and ``down_proj``), split by whether the source
of its ``forward`` is one that rule 1 accepts (whether an instance is then replaced also depends
on its projections and activation).
"""
import importlib
import inspect
import pkgutil
import warnings

import transformers
import transformers.models

from fusedmlp.nn.patch import _gated_form

warnings.filterwarnings("ignore")
followed, not_followed = set(), set()
for info in pkgutil.iter_modules(transformers.models.__path__):
    try:
        module = importlib.import_module(f"transformers.models.{info.name}.modeling_{info.name}")
    except Exception:  # no modeling file, or one that needs an optional dependency
        continue
    for name, cls in vars(module).items():
        if not (inspect.isclass(cls) and cls.__module__ == module.__name__ and name.endswith("MLP")):
            continue
        try:
            init = inspect.getsource(cls.__init__)
        except (OSError, TypeError):
            continue
        if "down_proj" in init and ("gate_up_proj" in init or ("gate_proj" in init and "up_proj" in init)):
            (followed if _gated_form(cls.forward) else not_followed).add(name)
print(f"transformers {transformers.__version__}: {len(followed)} gated feed-forward classes followed, "
      f"{len(not_followed)} not")
print("followed:", " ".join(sorted(followed)))
print("not followed:", " ".join(sorted(not_followed)))
