import json, os, sys  # noqa: F401

from openforge_verify import V, done, pristine, read, run  # noqa: F401

c = read("a/b/c/leaf.txt")
done(c is not None and c.strip() == "leaf")
