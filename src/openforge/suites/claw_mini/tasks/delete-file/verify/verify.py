import json, os, sys  # noqa: F401

from openforge_verify import V, done, pristine, read, run  # noqa: F401

done(not os.path.exists("junk.tmp") and read("keep.txt") == pristine("keep.txt"))
