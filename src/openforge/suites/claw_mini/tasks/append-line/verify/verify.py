import json, os, sys  # noqa: F401

from openforge_verify import V, done, pristine, read, run  # noqa: F401

c = read("log.txt")
done(c is not None and c.rstrip("\n").split("\n") == pristine("log.txt").rstrip("\n").split("\n") + ["end"], found=c)
