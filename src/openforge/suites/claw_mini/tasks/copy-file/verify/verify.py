import json, os, sys  # noqa: F401

from openforge_verify import V, done, pristine, read, run  # noqa: F401

want = pristine("notes.txt")
done(read("backup.txt") == want and read("notes.txt") == want)
