import json, os, sys  # noqa: F401

from openforge_verify import V, done, pristine, read, run  # noqa: F401

import importlib.util
sys.path.insert(0, os.getcwd())
try:
    spec = importlib.util.spec_from_file_location("fib", "fib.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    got = [mod.fib(i) for i in (0, 1, 2, 10, 20, 30)]
except Exception as exc:
    done(False, why=repr(exc))
done(got == [0, 1, 1, 55, 6765, 832040], got=got)
