import json, os, sys  # noqa: F401

from openforge_verify import V, done, pristine, read, run  # noqa: F401

c = read("answer.txt")
done(c is not None and c.strip() == "42", found=c)
