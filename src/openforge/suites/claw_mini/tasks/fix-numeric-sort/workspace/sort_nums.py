import sys

print(" ".join(sorted(sys.argv[1:])))
