import sys

n = int(sys.argv[1])
total = 0
for i in range(n):
    total += i
print(total)
