import json, os, sys  # noqa: F401

from openforge_verify import V, done, pristine, read, run  # noqa: F401

c = read("largest.txt")
done(c is not None and os.path.basename(c.strip()) == "gamma.bin", found=c)
