import sys

lines = open(sys.argv[1]).read().splitlines()
print(sum(int(line.split(",")[1]) for line in lines))
