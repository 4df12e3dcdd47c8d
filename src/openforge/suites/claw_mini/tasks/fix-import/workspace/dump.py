import sys

print(json.dumps(sys.argv[1:]))
