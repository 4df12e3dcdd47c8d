import json, os, sys  # noqa: F401

from openforge_verify import V, done, pristine, read, run  # noqa: F401

c = read("out/done.txt")
done(os.path.isdir("out") and c is not None and c.strip() == "ok")
