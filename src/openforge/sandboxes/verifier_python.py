"""The ``python3`` a verifier runs: the system's, isolated (``-I``), started as plain python3.

A verifier's ``python3`` is a shim that runs ``python3 -I`` on this file, so no ``PYTHON*``
variable, user site directory or ``.pth`` file of the agent's reaches it, and its working
directory (the agent's workspace) is never on ``sys.path``. Then it starts what was asked
as ``python3`` would: a script (its own directory first on ``sys.path``, as usual), ``-c``,
``-m`` or standard input; options that change nothing here (``-u``, ``-B``, ``-O``,
``-E``, ``-s``, ``-S``, ``-I``, ``-P``, ``-W X``, ``-X X``) are accepted. The verifier's
own directory (``$OPENFORGE_VERIFY_DIR``) is last on ``sys.path``, so ``openforge_verify``
imports from anywhere. Standard library only: it runs on whatever Python 3 the sandbox has.
"""

import os
import runpy
import sys

_FLAGS = set("uBOEsSIPbdqRvi")
_WITH_VALUE = ("-W", "-X")


def _main() -> None:
    args = sys.argv[1:]
    while args and args[0].startswith("-") and args[0] not in ("-", "-c", "-m"):
        opt = args.pop(0)
        if opt == "--":
            break
        if opt in _WITH_VALUE:
            args = args[1:]
        elif opt[:2] in _WITH_VALUE:
            continue
        elif set(opt[1:]) <= _FLAGS:
            if "B" in opt:
                sys.dont_write_bytecode = True
        else:
            sys.exit(f"python3 (verifier): unsupported option {opt}")
    vdir = os.environ.get("OPENFORGE_VERIFY_DIR")
    if vdir:
        sys.path.append(vdir)
    if args and args[0] == "-c":
        if len(args) < 2:
            sys.exit("python3 (verifier): -c needs an argument")
        sys.argv = ["-c", *args[2:]]
        code = compile(args[1], "<string>", "exec")
        exec(code, {"__name__": "__main__", "__builtins__": __builtins__})
    elif args and args[0] == "-m":
        if len(args) < 2:
            sys.exit("python3 (verifier): -m needs an argument")
        sys.argv = [args[1], *args[2:]]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    elif not args or args[0] == "-":
        sys.argv = ["-", *args[1:]] if args else [""]
        code = compile(sys.stdin.read(), "<stdin>", "exec")
        exec(code, {"__name__": "__main__", "__builtins__": __builtins__})
    else:
        script = args[0]
        sys.argv = list(args)
        sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
        runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    _main()
