import json, os, sys  # noqa: F401

from openforge_verify import V, done, pristine, read, run  # noqa: F401

done(os.path.isfile("ready") and os.path.getsize("ready") == 0)
